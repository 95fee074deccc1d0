//! Screen scaling between a sandbox and a model. The model sees the screen
//! shrunk to fit a target (1024×768 by default), aspect ratio kept and never
//! enlarged; its coordinates map back to sandbox pixels so that mapping a
//! model point to the screen and back gives the same point, for every point
//! the model can name.
//!
//! A model pixel `m` maps to screen pixel `ceil(m · S / M)` and a screen
//! pixel `s` to model pixel `floor(s · M / S)`, with `S` ≥ `M` the screen and
//! model sizes on one axis: the first is the smallest screen pixel whose
//! model pixel is `m`, so the round trip is exact.

use bytes::Bytes;
use flotilla_types::action::Action;

use crate::image::{resize_rgb, ImageError, Rgb};
use crate::model::Screen;
use crate::sandbox::Screenshot;

/// The size a model sees unless configured otherwise.
pub const DEFAULT_TARGET: (u32, u32) = (1024, 768);

/// The mapping between one sandbox screen and what its model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    pub screen: (u32, u32),
    pub model: (u32, u32),
}

impl Scale {
    /// The largest size within `target` with the screen's aspect ratio, at
    /// most the screen itself.
    pub fn fit(screen: (u32, u32), target: (u32, u32)) -> Self {
        let (sw, sh) = (u64::from(screen.0.max(1)), u64::from(screen.1.max(1)));
        let (tw, th) = (u64::from(target.0.max(1)), u64::from(target.1.max(1)));
        if sw <= tw && sh <= th {
            return Self { screen, model: screen };
        }
        // Width-bound when sw/sh ≥ tw/th.
        let (mw, mh) = if sw * th >= sh * tw { (tw, (sh * tw / sw).max(1)) } else { ((sw * th / sh).max(1), th) };
        Self { screen, model: (mw as u32, mh as u32) }
    }

    pub fn is_identity(&self) -> bool {
        self.screen == self.model
    }

    /// A model point on the screen.
    pub fn to_screen(&self, x: u32, y: u32) -> (u32, u32) {
        (up(x, self.screen.0, self.model.0), up(y, self.screen.1, self.model.1))
    }

    /// A screen point as the model sees it.
    pub fn to_model(&self, x: u32, y: u32) -> (u32, u32) {
        (down(x, self.screen.0, self.model.0), down(y, self.screen.1, self.model.1))
    }

    /// Whether a model point lies on the model's screen.
    pub fn contains(&self, x: u32, y: u32) -> bool {
        x < self.model.0 && y < self.model.1
    }

    /// An action in model coordinates, in screen coordinates.
    pub fn action_to_screen(&self, action: &Action) -> Action {
        let point = |x: u32, y: u32| self.to_screen(x, y);
        match action.clone() {
            Action::Click { x, y, button } => {
                let (x, y) = point(x, y);
                Action::Click { x, y, button }
            }
            Action::DoubleClick { x, y } => {
                let (x, y) = point(x, y);
                Action::DoubleClick { x, y }
            }
            Action::TripleClick { x, y } => {
                let (x, y) = point(x, y);
                Action::TripleClick { x, y }
            }
            Action::Move { x, y } => {
                let (x, y) = point(x, y);
                Action::Move { x, y }
            }
            Action::Scroll { x, y, scroll_x, scroll_y } => {
                let (x, y) = point(x, y);
                Action::Scroll { x, y, scroll_x, scroll_y }
            }
            Action::Drag { path } => Action::Drag {
                path: path
                    .into_iter()
                    .map(|[x, y]| {
                        let (x, y) = point(x, y);
                        [x, y]
                    })
                    .collect(),
            },
            other => other,
        }
    }

    /// The screenshot as the model sees it: the capture's own PNG when no
    /// scaling is needed, else its pixels shrunk and encoded once (decoded
    /// from the PNG only when the capture did not hand them along).
    pub fn screen_for_model(&self, shot: &Screenshot) -> Result<Screen, ImageError> {
        if self.is_identity() {
            return Ok(Screen { png: shot.png.clone(), width: shot.width, height: shot.height });
        }
        let small = match captured_pixels(shot) {
            Some(pixels) => resize_rgb(pixels, (shot.width, shot.height), self.model)?,
            None => Rgb::decode_png(&shot.png)?.resize(self.model.0, self.model.1)?,
        };
        Ok(Screen { png: Bytes::from(small.encode_png()?), width: small.width, height: small.height })
    }

    /// A region of the screen (`[x1, y1, x2, y2]` in model coordinates),
    /// shown at up to the model's size without enlarging it past the
    /// screen's own pixels.
    pub fn zoom(&self, shot: &Screenshot, region: [u32; 4]) -> Result<Screen, ImageError> {
        let (x1, y1) = self.to_screen(region[0].min(region[2]), region[1].min(region[3]));
        let (x2, y2) = self.to_screen(region[0].max(region[2]), region[1].max(region[3]));
        let full = match captured_pixels(shot) {
            Some(pixels) => Rgb { width: shot.width, height: shot.height, pixels: pixels.to_vec() },
            None => Rgb::decode_png(&shot.png)?,
        };
        let part = full.crop(x1, y1, (x2 - x1).max(1), (y2 - y1).max(1));
        let fit = Scale::fit((part.width, part.height), self.model);
        let shown = part.resize(fit.model.0, fit.model.1)?;
        Ok(Screen { png: Bytes::from(shown.encode_png()?), width: shown.width, height: shown.height })
    }
}

/// The capture's RGB pixels, when it has them for its whole screen.
fn captured_pixels(shot: &Screenshot) -> Option<&[u8]> {
    let expected = shot.width as usize * shot.height as usize * 3;
    shot.rgb.as_deref().filter(|pixels| pixels.len() == expected)
}

/// `ceil(m · screen / model)`.
fn up(m: u32, screen: u32, model: u32) -> u32 {
    let (m, screen, model) = (u64::from(m), u64::from(screen), u64::from(model.max(1)));
    (m * screen).div_ceil(model) as u32
}

/// `floor(s · model / screen)`.
fn down(s: u32, screen: u32, model: u32) -> u32 {
    (u64::from(s) * u64::from(model) / u64::from(screen.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A screen-sized gradient as a capture hands it over, with or without
    /// its pixels beside the PNG.
    fn capture(width: u32, height: u32, with_pixels: bool) -> Screenshot {
        let pixels: Vec<u8> = (0..height).flat_map(|y| (0..width).flat_map(move |x| [x as u8, y as u8, (x ^ y) as u8])).collect();
        let png = crate::image::encode_png(&pixels, width, height).expect("encode");
        Screenshot { png: png.into(), width, height, rgb: with_pixels.then(|| pixels.into()) }
    }

    #[test]
    fn an_unscaled_screen_is_the_capture_itself() {
        let shot = capture(64, 48, true);
        let screen = Scale::fit((64, 48), DEFAULT_TARGET).screen_for_model(&shot).expect("shown");
        assert_eq!(screen.png.as_ptr(), shot.png.as_ptr(), "the PNG is shared, not copied");
    }

    #[test]
    fn scaling_uses_the_captured_pixels_and_never_decodes() {
        let scale = Scale::fit((200, 100), (100, 100));
        let decoded = scale.screen_for_model(&capture(200, 100, false)).expect("decoded and scaled");
        let mut shot = capture(200, 100, true);
        shot.png = Bytes::from_static(b"not a png");
        let from_pixels = scale.screen_for_model(&shot).expect("scaled from the pixels");
        assert_eq!((from_pixels.width, from_pixels.height), (100, 50));
        assert_eq!(from_pixels, decoded, "the same image either way");
    }

    #[test]
    fn pixels_of_the_wrong_size_are_ignored() {
        let scale = Scale::fit((200, 100), (100, 100));
        let mut shot = capture(200, 100, true);
        shot.rgb = Some(Bytes::from_static(&[1, 2, 3]));
        assert_eq!(
            scale.screen_for_model(&shot).expect("decoded instead"),
            scale.screen_for_model(&capture(200, 100, false)).expect("scaled")
        );
    }

    #[test]
    fn zoom_is_the_same_with_or_without_the_pixels() {
        let scale = Scale::fit((400, 300), (200, 150));
        let region = [10, 10, 60, 40];
        let with = scale.zoom(&capture(400, 300, true), region).expect("zoom");
        assert_eq!(with, scale.zoom(&capture(400, 300, false), region).expect("zoom"));
    }

    #[test]
    fn common_screens_fit_the_default_target() {
        assert_eq!(Scale::fit((1920, 1080), DEFAULT_TARGET).model, (1024, 576));
        assert_eq!(Scale::fit((1024, 768), DEFAULT_TARGET).model, (1024, 768));
        assert_eq!(Scale::fit((2560, 1600), DEFAULT_TARGET).model, (1024, 640));
        assert_eq!(Scale::fit((800, 600), DEFAULT_TARGET).model, (800, 600), "never enlarged");
        assert_eq!(Scale::fit((768, 1366), DEFAULT_TARGET).model, (431, 768), "portrait is height-bound");
    }

    #[test]
    fn corners_map_to_corners() {
        let scale = Scale::fit((1920, 1080), DEFAULT_TARGET);
        assert_eq!(scale.to_screen(0, 0), (0, 0));
        let (x, y) = scale.to_screen(1023, 575);
        assert!(x < 1920 && y < 1080 && x >= 1918 && y >= 1077, "({x}, {y})");
    }

    #[test]
    fn actions_are_mapped_point_by_point() {
        let scale = Scale { screen: (2048, 1536), model: (1024, 768) };
        assert_eq!(scale.action_to_screen(&Action::Move { x: 10, y: 20 }), Action::Move { x: 20, y: 40 });
        assert_eq!(
            scale.action_to_screen(&Action::Drag { path: vec![[1, 1], [2, 3]] }),
            Action::Drag { path: vec![[2, 2], [4, 6]] }
        );
        assert_eq!(scale.action_to_screen(&Action::Type { text: "x".into() }), Action::Type { text: "x".into() });
    }

    proptest! {
        #[test]
        fn model_points_round_trip_exactly(sw in 1u32..8000, sh in 1u32..8000, tw in 1u32..4000, th in 1u32..4000, fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
            let scale = Scale::fit((sw, sh), (tw, th));
            let (mw, mh) = scale.model;
            prop_assert!(mw >= 1 && mh >= 1 && mw <= sw && mh <= sh && mw <= tw.max(1) && mh <= th.max(1));
            let mx = ((f64::from(mw) * fx) as u32).min(mw - 1);
            let my = ((f64::from(mh) * fy) as u32).min(mh - 1);
            let (x, y) = scale.to_screen(mx, my);
            prop_assert!(x < sw && y < sh, "({x}, {y}) is off a {sw}x{sh} screen");
            prop_assert_eq!(scale.to_model(x, y), (mx, my));
        }

        #[test]
        fn the_aspect_ratio_is_kept_within_a_pixel(sw in 16u32..8000, sh in 16u32..8000) {
            let scale = Scale::fit((sw, sh), DEFAULT_TARGET);
            let (mw, mh) = scale.model;
            let expected_h = f64::from(sh) * f64::from(mw) / f64::from(sw);
            let expected_w = f64::from(sw) * f64::from(mh) / f64::from(sh);
            prop_assert!((f64::from(mh) - expected_h).abs() <= 1.0 || (f64::from(mw) - expected_w).abs() <= 1.0);
        }
    }
}
