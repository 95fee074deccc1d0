//! Reading a local desktop's screen as fast as the X server allows, since a
//! screenshot is on the path of every step.
//!
//! The pixels come through MIT-SHM when the server offers version 1.2: one
//! memfd per display, handed to the server once (`ShmAttachFd`), that each
//! capture's `ShmGetImage` fills and the worker reads back with one `pread`
//! — no 3–8 MB reply through the X socket. No System V segment is made, so
//! nothing outlives the display: the server lets go of the memfd when the
//! connection closes, the kernel frees it with the last descriptor. A
//! server without it, or a segment that fails, falls back to plain
//! `GetImage` for the rest of the display's life.
//!
//! A capture whose pixels equal the previous capture's returns the previous
//! [`Screenshot`] (the same PNG bytes) without encoding again: waiting for a
//! screen to settle compares captures that are mostly the same.

use std::fs::File;
use std::os::unix::fs::FileExt as _;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageFormat, ImageOrder, Window};
use x11rb::rust_connection::RustConnection;

use flotilla_sandbox::{SandboxError, Screenshot};

/// The first MIT-SHM version with `ShmAttachFd`.
const SHM_FD_VERSION: (u16, u16) = (1, 2);

fn x_error(error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Display(error.to_string())
}

/// The screen reader of one display; see the module doc.
pub(crate) struct Capture {
    format: PixelFormat,
    width: u16,
    height: u16,
    segment: Option<Segment>,
    /// The pixels of the capture in hand, as the server lays them out.
    raw: Vec<u8>,
    /// The previous capture: its pixels and what was made of them.
    last: Option<(Vec<u8>, Screenshot)>,
}

/// A memfd the server writes captures into.
struct Segment {
    id: shm::Seg,
    file: File,
}

impl Capture {
    /// The reader of `screen`, with a shared segment when the server can.
    pub fn new(conn: &RustConnection, screen: &xproto::Screen) -> Result<Self, SandboxError> {
        let format = PixelFormat::of(conn.setup(), screen)?;
        let (width, height) = (screen.width_in_pixels, screen.height_in_pixels);
        let segment = match Segment::attach(conn, format.frame_bytes(width, height)) {
            Ok(segment) => segment,
            Err(e) => {
                tracing::debug!(error = %e, "no shared memory for screenshots; reading them through the socket");
                None
            }
        };
        Ok(Self { format, width, height, segment, raw: Vec::new(), last: None })
    }

    /// Whether captures go through shared memory.
    #[cfg(test)]
    pub fn shared(&self) -> bool {
        self.segment.is_some()
    }

    /// Reads through the socket from now on, as after a failed segment.
    #[cfg(test)]
    pub fn socket_only(&mut self) {
        self.segment = None;
    }

    /// The whole screen now: its PNG and packed RGB pixels.
    pub fn take(&mut self, conn: &RustConnection, root: Window) -> Result<Screenshot, SandboxError> {
        self.read(conn, root)?;
        let spare = match self.last.take() {
            Some((pixels, shot)) if pixels == self.raw => {
                self.last = Some((pixels, shot.clone()));
                return Ok(shot);
            }
            Some((pixels, _)) => pixels,
            None => Vec::new(),
        };
        let (width, height) = (u32::from(self.width), u32::from(self.height));
        let rgb = self.format.rgb_from(&self.raw, usize::from(self.width), usize::from(self.height))?;
        let png = flotilla_sandbox::image::encode_png(&rgb, width, height)
            .map_err(|e| SandboxError::Display(format!("cannot encode the screenshot: {e}")))?;
        let shot = Screenshot { png: png.into(), width, height, rgb: Some(rgb.into()) };
        let pixels = std::mem::replace(&mut self.raw, spare);
        self.last = Some((pixels, shot.clone()));
        Ok(shot)
    }

    /// Reads the screen's pixels into `raw`.
    fn read(&mut self, conn: &RustConnection, root: Window) -> Result<(), SandboxError> {
        if let Some(segment) = &self.segment {
            match segment.read(conn, root, (self.width, self.height), &mut self.raw) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, "shared-memory screenshot failed; reading through the socket from now on");
                    self.segment = None;
                }
            }
        }
        let image = conn
            .get_image(ImageFormat::Z_PIXMAP, root, 0, 0, self.width, self.height, !0)
            .map_err(x_error)?
            .reply()
            .map_err(x_error)?;
        self.raw = image.data;
        Ok(())
    }
}

impl Segment {
    /// A memfd of `bytes` attached to the server, or `None` when the server
    /// has no MIT-SHM 1.2.
    fn attach(conn: &RustConnection, bytes: usize) -> Result<Option<Self>, SandboxError> {
        if conn.extension_information(shm::X11_EXTENSION_NAME).map_err(x_error)?.is_none() {
            return Ok(None);
        }
        let version = conn.shm_query_version().map_err(x_error)?.reply().map_err(x_error)?;
        if (version.major_version, version.minor_version) < SHM_FD_VERSION {
            return Ok(None);
        }
        let fd = rustix::fs::memfd_create("flotilla-screen", rustix::fs::MemfdFlags::CLOEXEC).map_err(x_error)?;
        let file = File::from(fd);
        file.set_len(bytes as u64).map_err(x_error)?;
        let for_server = file.try_clone().map_err(x_error)?;
        let id = conn.generate_id().map_err(x_error)?;
        conn.shm_attach_fd(id, std::os::fd::OwnedFd::from(for_server), false).map_err(x_error)?.check().map_err(x_error)?;
        Ok(Some(Self { id, file }))
    }

    fn read(
        &self,
        conn: &RustConnection,
        root: Window,
        (width, height): (u16, u16),
        into: &mut Vec<u8>,
    ) -> Result<(), SandboxError> {
        let format = u8::from(ImageFormat::Z_PIXMAP);
        let reply =
            conn.shm_get_image(root, 0, 0, width, height, !0, format, self.id, 0).map_err(x_error)?.reply().map_err(x_error)?;
        into.resize(reply.size as usize, 0);
        self.file.read_exact_at(into, 0).map_err(x_error)
    }
}

/// How the server lays out pixels of a Z-format image of the root window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PixelFormat {
    bits_per_pixel: u8,
    scanline_pad: u8,
    little_endian: bool,
    masks: [u32; 3],
}

impl PixelFormat {
    fn of(setup: &xproto::Setup, screen: &xproto::Screen) -> Result<Self, SandboxError> {
        let format = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == screen.root_depth)
            .ok_or_else(|| x_error("no pixmap format for the root depth"))?;
        let visual = screen
            .allowed_depths
            .iter()
            .flat_map(|d| d.visuals.iter())
            .find(|v| v.visual_id == screen.root_visual)
            .ok_or_else(|| x_error("the root visual is not listed"))?;
        let pixels = Self {
            bits_per_pixel: format.bits_per_pixel,
            scanline_pad: format.scanline_pad,
            little_endian: setup.image_byte_order == ImageOrder::LSB_FIRST,
            masks: [visual.red_mask, visual.green_mask, visual.blue_mask],
        };
        if pixels.bits_per_pixel != 32 || pixels.masks.contains(&0) {
            return Err(SandboxError::Unavailable(format!(
                "unsupported screen format: {} bits per pixel, depth {}",
                pixels.bits_per_pixel, screen.root_depth
            )));
        }
        Ok(pixels)
    }

    /// The bytes of one row of `width` pixels, padding included.
    fn stride(&self, width: usize) -> usize {
        let pad = usize::from(self.scanline_pad.max(8));
        (width * usize::from(self.bits_per_pixel)).div_ceil(pad) * pad / 8
    }

    /// The bytes of a whole screen.
    fn frame_bytes(&self, width: u16, height: u16) -> usize {
        self.stride(usize::from(width)) * usize::from(height)
    }

    /// Converts a 32-bit Z image (BGRX on little-endian servers) to packed RGB.
    pub fn rgb_from(&self, data: &[u8], width: usize, height: usize) -> Result<Vec<u8>, SandboxError> {
        let stride = self.stride(width);
        if data.len() < stride * height {
            return Err(x_error(format!("image has {} bytes, expected {}", data.len(), stride * height)));
        }
        let mut rgb = vec![0; width * height * 3];
        let rows = data.chunks_exact(stride).take(height).zip(rgb.chunks_exact_mut(width * 3));
        if self.little_endian && self.masks == [0xff_0000, 0xff00, 0xff] {
            // The usual layout (BGRX in memory): a byte shuffle.
            for (row, out) in rows {
                for (pixel, rgb) in row[..width * 4].chunks_exact(4).zip(out.chunks_exact_mut(3)) {
                    rgb.copy_from_slice(&[pixel[2], pixel[1], pixel[0]]);
                }
            }
            return Ok(rgb);
        }
        let channels = self.masks.map(|mask| (mask.trailing_zeros(), mask >> mask.trailing_zeros()));
        for (row, out) in rows {
            for (pixel, rgb) in row[..width * 4].chunks_exact(4).zip(out.chunks_exact_mut(3)) {
                let bytes = [pixel[0], pixel[1], pixel[2], pixel[3]];
                let value = if self.little_endian { u32::from_le_bytes(bytes) } else { u32::from_be_bytes(bytes) };
                for (slot, (shift, max)) in rgb.iter_mut().zip(channels) {
                    let channel = (value >> shift) & max;
                    let scaled = if max == 0xff { channel } else { channel * 255 / max.max(1) };
                    *slot = u8::try_from(scaled).unwrap_or(u8::MAX);
                }
            }
        }
        Ok(rgb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bgrx_converts_to_rgb() {
        let format = PixelFormat { bits_per_pixel: 32, scanline_pad: 32, little_endian: true, masks: [0xff0000, 0xff00, 0xff] };
        // Two pixels: pure red, then (1, 2, 3); the X byte is ignored.
        let data = [0, 0, 255, 9, 3, 2, 1, 9];
        assert_eq!(format.rgb_from(&data, 2, 1).expect("converts"), [255, 0, 0, 1, 2, 3]);
        assert!(format.rgb_from(&data, 3, 1).is_err());
        // Two rows of one pixel each.
        assert_eq!(format.rgb_from(&data, 1, 2).expect("converts"), [255, 0, 0, 1, 2, 3]);
        assert_eq!(format.frame_bytes(2, 3), 24);
    }

    #[test]
    fn other_layouts_convert_by_their_masks() {
        // Big-endian with red in the low byte: converted by the masks, not the shuffle.
        let format = PixelFormat { bits_per_pixel: 32, scanline_pad: 32, little_endian: false, masks: [0xff, 0xff00, 0xff_0000] };
        let data = [9, 3, 2, 1];
        assert_eq!(format.rgb_from(&data, 1, 1).expect("converts"), [1, 2, 3]);
    }
}
