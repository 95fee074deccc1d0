//! Screenshots the way the E2B Desktop SDK takes them: `scrot` writes a PNG
//! (pointer drawn in) to a fresh file inside the sandbox, the file is read
//! back through envd, then removed. The PNG's header gives the size; one
//! that is not already 8-bit RGB is converted, since that is what every
//! provider hands on.

use std::io::Cursor;

use flotilla_sandbox::image::Rgb;
use flotilla_sandbox::{SandboxError, Screenshot};

use super::xdo::quote;

/// The largest screen a capture may have, in pixels (8K).
const MAX_PIXELS: u64 = 7680 * 4320;

/// A fresh path in the sandbox's `/tmp` for one capture.
pub(crate) fn shot_path() -> String {
    format!("/tmp/flotilla-shot-{:016x}.png", rand::random::<u64>())
}

/// The command that captures the screen to `path`.
pub(crate) fn capture_command(path: &str) -> String {
    format!("scrot --overwrite --pointer {}", quote(path))
}

/// The command that removes a capture once read.
pub(crate) fn cleanup_command(path: &str) -> String {
    format!("rm -f -- {}", quote(path))
}

/// A screenshot from the PNG a capture wrote.
pub(crate) fn from_png(png: Vec<u8>) -> Result<Screenshot, SandboxError> {
    let (width, height, plain_rgb) = header(&png)?;
    if plain_rgb {
        return Ok(Screenshot { png: png.into(), width, height, rgb: None });
    }
    let rgb = Rgb::decode_png(&png).map_err(bad_png)?;
    Ok(Screenshot { png: rgb.encode_png().map_err(bad_png)?.into(), width, height, rgb: Some(rgb.pixels.into()) })
}

fn bad_png(error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Display(format!("the screenshot is not a usable PNG: {error}"))
}

/// The size, and whether the pixels are already 8-bit RGB.
fn header(png: &[u8]) -> Result<(u32, u32, bool), SandboxError> {
    let mut decoder = png::Decoder::new(Cursor::new(png));
    let info = decoder.read_header_info().map_err(bad_png)?;
    let (width, height) = (info.width, info.height);
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(bad_png(format!("{width}x{height} is larger than any screen")));
    }
    let plain = info.color_type == png::ColorType::Rgb && info.bit_depth == png::BitDepth::Eight;
    Ok((width, height, plain))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_of(color: png::ColorType, width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("header");
        writer.write_image_data(pixels).expect("pixels");
        writer.finish().expect("finish");
        out
    }

    #[test]
    fn rgb_pngs_pass_through_with_their_size() {
        let png = png_of(png::ColorType::Rgb, 2, 1, &[1, 2, 3, 4, 5, 6]);
        let shot = from_png(png.clone()).expect("a screenshot");
        assert_eq!((shot.width, shot.height, shot.png.to_vec(), shot.rgb), (2, 1, png, None));
    }

    #[test]
    fn rgba_pngs_become_rgb() {
        let png = png_of(png::ColorType::Rgba, 1, 2, &[1, 2, 3, 255, 4, 5, 6, 0]);
        let shot = from_png(png).expect("a screenshot");
        assert_eq!((shot.width, shot.height), (1, 2));
        assert_eq!(Rgb::decode_png(&shot.png).expect("decodes").pixels, [1, 2, 3, 4, 5, 6]);
        assert!(header(&shot.png).expect("header").2, "converted to plain RGB");
        assert_eq!(shot.rgb.as_deref(), Some(&[1, 2, 3, 4, 5, 6][..]), "the decoded pixels come along");
    }

    #[test]
    fn garbage_is_a_display_error() {
        assert!(matches!(from_png(b"not a png".to_vec()), Err(SandboxError::Display(_))));
    }

    #[test]
    fn paths_are_quoted_in_commands() {
        assert_eq!(capture_command("/tmp/a b.png"), "scrot --overwrite --pointer '/tmp/a b.png'");
        assert!(shot_path().starts_with("/tmp/flotilla-shot-"));
    }
}
