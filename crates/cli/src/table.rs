//! Plain-text tables for the CLI's reports (aligned columns, one header rule).

/// Render `rows` under `headers`, each column as wide as its widest cell. Cells that
/// parse as numbers are right-aligned, everything else left-aligned.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| rows.iter().map(|r| r[c].len()).chain([headers[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| if cell.parse::<f64>().is_ok() { format!("{cell:>w$}") } else { format!("{cell:<w$}") })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    out.push_str(&widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("  "));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}
