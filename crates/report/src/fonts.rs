//! The typeface of the plots: DejaVu Sans, shipped in `crates/report/fonts` (its license is
//! beside it) and compiled into the binary. Plots are laid out and rasterised with it through
//! plotters' `ab_glyph` backend, so they look the same on every machine and need neither
//! fontconfig nor FreeType nor any installed font.

use std::sync::Once;

use plotters::style::{FontStyle, register_font};

/// The family name plots ask for. The SVG backend writes it as the `font-family` of every text
/// element, so it is a CSS font list: a viewer that has DejaVu Sans shows the face the text was
/// measured with, any other falls back to its sans-serif.
pub const FAMILY: &str = "DejaVu Sans, sans-serif";

static REGULAR: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
static BOLD: &[u8] = include_bytes!("../fonts/DejaVuSans-Bold.ttf");

/// The shipped face of a style: bold for bold, the regular face for every other style.
pub(crate) fn face(style: FontStyle) -> &'static [u8] {
    match style {
        FontStyle::Bold => BOLD,
        _ => REGULAR,
    }
}

/// Registers the shipped faces under [`FAMILY`] (once per process; later calls do nothing).
/// Every drawing function calls it first: plotters looks fonts up in a process-wide table.
pub fn ensure_registered() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (style, bytes) in [(FontStyle::Normal, REGULAR), (FontStyle::Bold, BOLD)] {
            // The bytes are the files compiled in; a failure is a broken build, which the
            // tests below catch.
            if register_font(FAMILY, style, bytes).is_err() {
                panic!(
                    "a shipped font for {FAMILY} ({}) is not a valid TrueType file",
                    style.as_str()
                );
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::style::{FontDesc, FontFamily};

    #[test]
    fn shipped_faces_register_and_measure_text() {
        ensure_registered();
        ensure_registered();
        let regular = FontDesc::new(FontFamily::Name(FAMILY), 20.0, FontStyle::Normal);
        let bold = FontDesc::new(FontFamily::Name(FAMILY), 20.0, FontStyle::Bold);
        let (w1, _) = regular.box_size("faults/sec").unwrap();
        let (w2, _) = bold.box_size("faults/sec").unwrap();
        assert!(w1 > 50 && w1 < 200, "{w1}");
        assert!(w2 > w1, "bold is wider: {w2} vs {w1}");
        assert!(
            include_str!("../fonts/LICENSE").contains("Bitstream Vera"),
            "the license ships with the fonts"
        );
    }
}
