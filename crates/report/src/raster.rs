//! The PNG drawing surface: plotters' bitmap backend, with text set by `ab_glyph` directly.
//!
//! plotters' own `ab_glyph` text drawing places each glyph's outline at the pen position
//! without its left side bearing and at whole pixels, so letters drift apart and together
//! ("h ost"). Here every glyph is placed at its exact (sub-pixel) pen position plus its
//! outline's offset, on a baseline that centres the capitals in the box plotters lays out, and
//! its coverage is blended into the pixels. Everything else is drawn by the bitmap backend.

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

use crate::fonts;

/// A bitmap backend whose text is set correctly; see the module documentation.
pub struct Raster<'a>(pub BitMapBackend<'a>);

type Error = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

impl DrawingBackend for Raster<'_> {
    type ErrorType = Error;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Error>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Error>> {
        self.0.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        (iw, ih): (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Error>> {
        self.0.blit_bitmap(pos, (iw, ih), src)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Error>> {
        let colour = style.color();
        if colour.alpha == 0.0 {
            return Ok(());
        }
        // The box plotters lays out (and measures the anchors by): advances and kerning of
        // this very face, `size / 1.24` high.
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let font = FontRef::try_from_slice(fonts::face(style.style()))
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let scale = PxScale::from(style.size() as f32);
        let scaled = font.as_scaled(scale);
        // Capitals centred in the box: the baseline half a cap height below its middle.
        let cap = font
            .outline_glyph(font.glyph_id('H').with_scale(scale))
            .map_or(scaled.ascent() * 0.75, |g| g.px_bounds().height());
        let baseline = height as f32 / 2.0 + cap / 2.0;
        let transform = style.transform();
        let mut caret = 0.0f32;
        let mut prev = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                caret += scaled.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(scale, point(caret, baseline));
            caret += scaled.h_advance(id);
            let Some(outline) = font.outline_glyph(glyph) else {
                continue; // a space
            };
            let b = outline.px_bounds();
            let mut pixels = Vec::new();
            outline.draw(|gx, gy, coverage| {
                if coverage > 0.0 {
                    pixels.push((
                        b.min.x as i32 + gx as i32,
                        b.min.y as i32 + gy as i32,
                        coverage,
                    ))
                }
            });
            for (x, y, coverage) in pixels {
                let (x, y) = transform.transform(x + dx, y + dy);
                self.0.draw_pixel(
                    (pos.0 + x, pos.1 + y),
                    BackendColor {
                        alpha: colour.alpha * f64::from(coverage.min(1.0)),
                        rgb: colour.rgb,
                    },
                )?;
            }
        }
        Ok(())
    }
}
