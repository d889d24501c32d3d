//! Text cells of the CSV files pagelab writes (`export`, `compare --format csv`), made safe to
//! open in a spreadsheet and still read back exactly by `pagelab import`.
//!
//! A spreadsheet takes a cell that starts with `=`, `+`, `-` or `@` (and, in some, a tab or a
//! carriage return) as a formula: a label such as `=HYPERLINK("http://…")` would run when the
//! export is opened (CSV or formula injection). As OWASP recommends, such a cell is written with
//! a single quote in front, which spreadsheets show as text and do not evaluate. So that the
//! quote can be taken off again without guessing, a cell that itself starts with a single quote
//! gets one too: [`neutralise`] prefixes `'` to every text cell starting with one of
//! `= + - @ \t \r '`, and [`restore`] removes one leading `'`, which undoes it for every string.
//! Numbers (task counts, values, run ids) are written by pagelab itself and are left alone.

use std::borrow::Cow;

/// The first characters that make a spreadsheet evaluate a cell, and the quote itself.
const TRIGGERS: &[char] = &['=', '+', '-', '@', '\t', '\r', '\''];

/// The cell to write for the text `s`: `s`, with a `'` in front if it starts with a formula
/// trigger or a quote.
pub fn neutralise(s: &str) -> Cow<'_, str> {
    if s.starts_with(TRIGGERS) {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// The text a cell written by [`neutralise`] stands for: without its first `'`, if it has one.
pub fn restore(cell: &str) -> &str {
    cell.strip_prefix('\'').unwrap_or(cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_quoted_and_restored() {
        for (text, cell) in [
            ("=SUM(A1:A9)", "'=SUM(A1:A9)"),
            ("+1", "'+1"),
            ("-x", "'-x"),
            ("@cmd", "'@cmd"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("'quoted", "''quoted"),
            ("'", "''"),
            ("base", "base"),
            ("a=b", "a=b"),
            ("", ""),
        ] {
            assert_eq!(neutralise(text), cell, "{text:?}");
            assert_eq!(restore(&neutralise(text)), text, "{text:?}");
        }
    }
}
