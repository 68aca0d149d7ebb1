//! Aligned columns for the operator commands' human output. Widths are display
//! columns, not characters: a business key in Chinese or Japanese takes two columns a
//! character, and the columns after it stay aligned.

use unicode_width::UnicodeWidthStr;

/// Prints `rows` under `header` in aligned columns (no header line when it is blank).
pub fn print_table(header: &[&str], rows: Vec<Vec<String>>) {
    for line in table_lines(header, rows) {
        println!("{line}");
    }
}

fn table_lines(header: &[&str], rows: Vec<Vec<String>>) -> Vec<String> {
    let header: Vec<String> = header.iter().map(|h| h.to_uppercase()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell}{}", " ".repeat(width - cell.width())))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let header_line =
        header.iter().any(|h| !h.is_empty()).then(|| line(header.iter().map(|h| h.to_uppercase()).collect()));
    header_line.into_iter().chain(rows.into_iter().map(line)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_keep_the_columns_aligned() {
        let rows = vec![vec!["订单-42".to_owned(), "t".to_owned()], vec!["k-1".to_owned(), "t".to_owned()]];
        let lines = table_lines(&["biz_key", "topic"], rows);
        assert_eq!(lines, vec!["BIZ_KEY  TOPIC", "订单-42  t", "k-1      t"]);
        let columns: Vec<usize> =
            lines.iter().map(|line| line.rsplit_once(' ').map_or(0, |(left, _)| left.width())).collect();
        assert!(
            columns.windows(2).all(|pair| pair[0] == pair[1]),
            "the last column starts at one display column: {columns:?}"
        );
    }
}
