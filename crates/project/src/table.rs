//! The reports' tables (`project --sensitivity`, `validate --sensitivity`): aligned plain text
//! for a terminal, or markdown for a document, from one set of rows. Built on comfy-table
//! (borderless, two spaces between columns, no wrapping: a report is read in a pager or pasted,
//! never squeezed to a terminal's width).

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};

/// `head` and `rows` as a table; the columns whose index is in `right` are right-aligned
/// (figures), the others left-aligned (names). Every row has `head.len()` cells.
pub fn render(head: &[&str], rows: &[Vec<String>], right: &[usize], markdown: bool) -> String {
    let mut t = Table::new();
    t.load_preset(if markdown {
        presets::ASCII_MARKDOWN
    } else {
        presets::NOTHING
    });
    t.set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(head.to_vec());
    for r in rows {
        t.add_row(r.clone());
    }
    for i in 0..head.len() {
        if let Some(c) = t.column_mut(i) {
            if right.contains(&i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
            if !markdown {
                c.set_padding((0, 2));
            }
        }
    }
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_aligns_names_left_and_figures_right_with_two_spaces_between() {
        let rows = vec![
            vec!["a".to_string(), "1.5".to_string()],
            vec!["longer".to_string(), "-12.25".to_string()],
        ];
        let t = render(&["name", "value"], &rows, &[1], false);
        assert_eq!(t, "name     value\na          1.5\nlonger  -12.25\n");
    }

    #[test]
    fn markdown_has_a_header_rule_and_pipes() {
        let rows = vec![vec!["a".to_string(), "1".to_string()]];
        let t = render(&["name", "value"], &rows, &[1], true);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(
            lines[0].starts_with('|') && lines[0].contains("name"),
            "{t}"
        );
        assert!(lines[1].contains("---"), "{t}");
        assert!(lines[2].contains("| a") && lines[2].ends_with('|'), "{t}");
    }
}
