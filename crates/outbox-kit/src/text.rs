//! Small text helpers shared by the database writers.

/// `text` cut to at most `max_bytes` bytes, on a character boundary (for bounded
/// VARCHAR columns such as `last_error` and `reason`).
pub fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate_utf8;

    #[test]
    fn truncate_keeps_utf8_boundaries() {
        assert_eq!(truncate_utf8("abc", 10), "abc");
        assert_eq!(truncate_utf8("日本語", 4), "日");
        assert_eq!(truncate_utf8("日本語", 6), "日本");
    }
}
