//! Screen images as pipelines handle them: 8-bit RGB pixels, PNG encoding
//! and decoding, cropping and resizing (with `fast_image_resize`, a
//! convolution filter that keeps text legible when a screen is shrunk for a
//! model).

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

/// Why an image could not be handled.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot decode the PNG: {0}")]
    Decode(String),
    #[error("cannot encode the PNG: {0}")]
    Encode(String),
    #[error("cannot resize the image: {0}")]
    Resize(String),
}

/// An 8-bit RGB image, rows top to bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl Rgb {
    /// Decodes a PNG of any 8-bit colour type into RGB.
    pub fn decode_png(png_bytes: &[u8]) -> Result<Self, ImageError> {
        let decode = |e: png::DecodingError| ImageError::Decode(e.to_string());
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = decoder.read_info().map_err(decode)?;
        let size = reader.output_buffer_size().ok_or_else(|| ImageError::Decode("the image is too large".into()))?;
        let mut buffer = vec![0; size];
        let frame = reader.next_frame(&mut buffer).map_err(decode)?;
        buffer.truncate(frame.buffer_size());
        let pixels = match frame.color_type {
            png::ColorType::Rgb => buffer,
            png::ColorType::Rgba => buffer.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
            png::ColorType::Grayscale => buffer.iter().flat_map(|&g| [g, g, g]).collect(),
            png::ColorType::GrayscaleAlpha => buffer.chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
            png::ColorType::Indexed => return Err(ImageError::Decode("an indexed PNG was not expanded".into())),
        };
        Ok(Self { width: frame.width, height: frame.height, pixels })
    }

    /// Encodes as an RGB PNG with fast compression.
    pub fn encode_png(&self) -> Result<Vec<u8>, ImageError> {
        encode_png(&self.pixels, self.width, self.height)
    }

    /// The region from (x, y), `width` × `height`, clipped to the image.
    pub fn crop(&self, x: u32, y: u32, width: u32, height: u32) -> Self {
        let x = x.min(self.width.saturating_sub(1));
        let y = y.min(self.height.saturating_sub(1));
        let width = width.clamp(1, self.width - x);
        let height = height.clamp(1, self.height - y);
        let row = self.width as usize * 3;
        let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
        for line in y..y + height {
            let start = line as usize * row + x as usize * 3;
            pixels.extend_from_slice(&self.pixels[start..start + width as usize * 3]);
        }
        Self { width, height, pixels }
    }

    /// The image resized to `width` × `height` (bilinear convolution).
    pub fn resize(&self, width: u32, height: u32) -> Result<Self, ImageError> {
        if (width, height) == (self.width, self.height) {
            return Ok(self.clone());
        }
        resize_rgb(&self.pixels, (self.width, self.height), (width, height))
    }
}

/// Packed RGB pixels of `from` size resized to `to` (bilinear convolution),
/// read in place.
pub fn resize_rgb(pixels: &[u8], from: (u32, u32), to: (u32, u32)) -> Result<Rgb, ImageError> {
    let resize = |e: &dyn std::fmt::Display| ImageError::Resize(e.to_string());
    let source = ImageRef::new(from.0, from.1, pixels, PixelType::U8x3).map_err(|e| resize(&e))?;
    let mut target = Image::new(to.0.max(1), to.1.max(1), PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    Resizer::new().resize(&source, &mut target, &options).map_err(|e| resize(&e))?;
    Ok(Rgb { width: target.width(), height: target.height(), pixels: target.into_vec() })
}

/// Encodes RGB pixels as a PNG with fast compression.
pub fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ImageError> {
    let encode = |e: png::EncodingError| ImageError::Encode(e.to_string());
    let mut out = Vec::with_capacity(rgb.len() / 8);
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // Level 1 without row filters: about the speed of the `Fast` preset
    // (fdeflate with adaptive filters) and less than half its size on a
    // screen of text (docs/benchmarks-history.md, step loop).
    encoder.set_deflate_compression(png::DeflateCompression::Level(1));
    encoder.set_filter(png::Filter::NoFilter);
    let mut writer = encoder.write_header().map_err(encode)?;
    writer.write_image_data(rgb).map_err(encode)?;
    writer.finish().map_err(encode)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: u32, height: u32) -> Rgb {
        let pixels = (0..height).flat_map(|y| (0..width).flat_map(move |x| [x as u8, y as u8, 128])).collect();
        Rgb { width, height, pixels }
    }

    #[test]
    fn png_round_trips() {
        let image = gradient(40, 30);
        let png = image.encode_png().expect("encode");
        assert_eq!(Rgb::decode_png(&png).expect("decode"), image);
        assert!(Rgb::decode_png(b"not a png").is_err());
    }

    #[test]
    fn crop_takes_the_region_and_clips_at_the_edges() {
        let image = gradient(40, 30);
        let part = image.crop(10, 5, 4, 3);
        assert_eq!((part.width, part.height), (4, 3));
        assert_eq!(&part.pixels[..3], &[10, 5, 128]);
        let edge = image.crop(38, 28, 10, 10);
        assert_eq!((edge.width, edge.height), (2, 2));
    }

    #[test]
    fn resize_gives_the_asked_size_and_keeps_flat_colour() {
        let flat = Rgb { width: 64, height: 48, pixels: [200, 10, 30].repeat(64 * 48) };
        let small = flat.resize(32, 24).expect("resize");
        assert_eq!((small.width, small.height), (32, 24));
        assert!(small.pixels.chunks_exact(3).all(|p| p == [200, 10, 30]));
    }

    #[test]
    fn resizing_borrowed_pixels_matches_resizing_the_image() {
        let image = gradient(64, 48);
        let borrowed = resize_rgb(&image.pixels, (64, 48), (40, 30)).expect("resize");
        assert_eq!(borrowed, image.resize(40, 30).expect("resize"));
        assert!(resize_rgb(&image.pixels[..10], (64, 48), (40, 30)).is_err(), "too few pixels is an error, not a panic");
    }
}
