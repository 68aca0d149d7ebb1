//! MySQL's binary JSON, written out as the JSON text MySQL itself prints.
//!
//! A JSON payload column reaches the relay in two ways: as text from a `SELECT` (the
//! sweep) and as MySQL's binary format in a row event (the binlog). A consumer must
//! get the same bytes either way, so the binlog path writes the binary value the way
//! the server's own `SELECT` does: keys in stored order (by length, then bytes),
//! `", "` and `": "` between items, doubles as the server prints them, and the values
//! only MySQL's JSON has (DECIMAL, DATE, TIME, DATETIME, other opaque types) in the
//! server's text form. A generic JSON library would sort keys, drop the spaces and
//! refuse opaque values.

use std::fmt::Write;

use base64::Engine;
use mysql_common::binlog::decimal::Decimal;
use mysql_common::binlog::jsonb::{Array, ComplexValue, Object, StorageFormat, Value};
use mysql_common::binlog::time::MysqlTime;
use mysql_common::constants::ColumnType;

/// A binary JSON value that cannot be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("malformed binary JSON: {0}")]
pub struct JsonError(String);

impl From<std::io::Error> for JsonError {
    fn from(error: std::io::Error) -> Self {
        Self(error.to_string())
    }
}

/// The JSON text MySQL prints for `value`.
pub fn to_text(value: &Value<'_>) -> Result<String, JsonError> {
    let mut out = String::new();
    write_value(value, &mut out)?;
    Ok(out)
}

fn write_value(value: &Value<'_>, out: &mut String) -> Result<(), JsonError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I16(n) => push_display(out, n),
        Value::U16(n) => push_display(out, n),
        Value::I32(n) => push_display(out, n),
        Value::U32(n) => push_display(out, n),
        Value::I64(n) => push_display(out, n),
        Value::U64(n) => push_display(out, n),
        Value::F64(x) => out.push_str(&double(*x)),
        Value::String(s) => push_quoted(out, &utf8(s.str_raw())?),
        Value::SmallArray(a) => write_array(a, out)?,
        Value::LargeArray(a) => write_array(a, out)?,
        Value::SmallObject(o) => write_object(o, out)?,
        Value::LargeObject(o) => write_object(o, out)?,
        Value::Opaque(opaque) => write_opaque(opaque.value_type(), opaque.data_raw(), out)?,
    }
    Ok(())
}

fn write_array<T: StorageFormat>(array: &ComplexValue<'_, T, Array>, out: &mut String) -> Result<(), JsonError> {
    out.push('[');
    for (i, element) in array.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_value(&element?, out)?;
    }
    out.push(']');
    Ok(())
}

fn write_object<T: StorageFormat>(object: &ComplexValue<'_, T, Object>, out: &mut String) -> Result<(), JsonError> {
    out.push('{');
    for (i, entry) in object.iter().enumerate() {
        let (key, value) = entry?;
        if i > 0 {
            out.push_str(", ");
        }
        push_quoted(out, &utf8(key.value_raw())?);
        out.push_str(": ");
        write_value(&value, out)?;
    }
    out.push('}');
    Ok(())
}

/// MySQL-only values: DECIMAL as a number with its scale, temporal values as
/// quoted text (with microseconds, except a DATE), anything else as
/// `"base64:type<N>:<data>"`.
fn write_opaque(kind: ColumnType, data: &[u8], out: &mut String) -> Result<(), JsonError> {
    let packed = || -> Result<i64, JsonError> {
        let bytes = data.first_chunk::<8>().ok_or_else(|| JsonError(format!("short {kind:?} value in JSON")))?;
        Ok(i64::from_le_bytes(*bytes))
    };
    match kind {
        ColumnType::MYSQL_TYPE_NEWDECIMAL => push_display(out, &Decimal::read_packed(data, false)?),
        ColumnType::MYSQL_TYPE_DATE => push_quoted(out, &MysqlTime::from_int64_date_packed(packed()?).to_string()),
        ColumnType::MYSQL_TYPE_TIME => {
            push_quoted(out, &format!("{:.6}", MysqlTime::from_int64_time_packed(packed()?)));
        }
        ColumnType::MYSQL_TYPE_DATETIME | ColumnType::MYSQL_TYPE_TIMESTAMP => {
            push_quoted(out, &format!("{:.6}", MysqlTime::from_int64_datetime_packed(packed()?)));
        }
        other => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(data);
            push_quoted(out, &format!("base64:type{}:{encoded}", other as u8));
        }
    }
    Ok(())
}

/// A double as MySQL prints it: the shortest digits that read back to the same
/// value, in plain notation while the decimal point sits at most 15 places right of
/// the first digit (further only inside the digits) and at most 14 zeros left of
/// it; otherwise in exponent notation (`1e15`, `1.5e300`, `1e-16`); then `.0` after
/// a plain whole number, so it still reads as a double.
fn double(x: f64) -> String {
    if !x.is_finite() {
        return "null".to_owned();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let count = digits.len() as i32;
    // Where the decimal point goes, counted in digits from the first one.
    let point = exponent + 1;
    let plain = point >= -14 && (point <= 15 || count > point);
    let body = if !plain {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        format!("{first}{rest}e{exponent}")
    } else if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if count > point {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{whole}.{fraction}")
    } else {
        format!("{digits}{}.0", "0".repeat((point - count) as usize))
    };
    format!("{sign}{body}")
}

fn push_display(out: &mut String, value: &impl std::fmt::Display) {
    let _ = write!(out, "{value}");
}

/// A JSON string as MySQL quotes it: `"` and `\` escaped, control characters as
/// `\b \f \n \r \t` or `\u00XX`, everything else (all of Unicode) as it is.
fn push_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn utf8(bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, JsonError> {
    std::str::from_utf8(bytes).map(std::borrow::Cow::Borrowed).map_err(|e| JsonError(format!("not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_the_server_prints_them() {
        let cases = [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1e14, "100000000000000.0"),
            (1e15, "1e15"),
            (1234567890123456.0, "1.234567890123456e15"),
            (1234567890123456.8, "1234567890123456.8"),
            (1.5e300, "1.5e300"),
            (1e-5, "0.00001"),
            (1e-15, "0.000000000000001"),
            (1e-16, "1e-16"),
            (-2.5e-7, "-0.00000025"),
            (1.7976931348623157e308, "1.7976931348623157e308"),
            (5e-324, "5e-324"),
        ];
        for (value, text) in cases {
            assert_eq!(double(value), text, "{value:e}");
        }
    }

    /// The text for a binary JSON value built by hand (type byte, then the value).
    fn text_of(binary: &[u8]) -> String {
        let value: Value<'_> = mysql_common::io::ParseBuf(binary).parse(()).expect("binary JSON");
        to_text(&value).expect("JSON text")
    }

    #[test]
    fn binary_scalars_and_nested_containers_print_as_the_server_prints_them() {
        let unicode = "中文😀";
        let mut string = vec![0x0c, unicode.len() as u8];
        string.extend(unicode.as_bytes());
        assert_eq!(text_of(&string), "\"中文😀\"");
        assert_eq!(text_of(&[[0x0a].as_slice(), &u64::MAX.to_le_bytes()].concat()), "18446744073709551615");
        assert_eq!(text_of(&[[0x09].as_slice(), &i64::MIN.to_le_bytes()].concat()), "-9223372036854775808");
        assert_eq!(text_of(&[[0x0b].as_slice(), &1e300f64.to_le_bytes()].concat()), "1e300");
        assert_eq!(text_of(&[[0x0b].as_slice(), &2.0f64.to_le_bytes()].concat()), "2.0");
        assert_eq!(
            (text_of(&[0x04, 0x00]), text_of(&[0x04, 0x01]), text_of(&[0x04, 0x02])),
            ("null".into(), "true".into(), "false".into())
        );
        // {"k": [1, "x"]}: a small object (count, size, key entry, value entry, key)
        // holding a small array at offset 12 (count, size, an inline int16, a string
        // at offset 10 of the array).
        let nested = [
            0x00, 1, 0, 24, 0, 11, 0, 1, 0, 0x02, 12, 0, b'k', //
            2, 0, 12, 0, 0x05, 1, 0, 0x0c, 10, 0, 1, b'x',
        ];
        assert_eq!(text_of(&nested), r#"{"k": [1, "x"]}"#);
    }

    #[test]
    fn strings_escape_quotes_backslashes_and_control_characters_only() {
        let mut out = String::new();
        push_quoted(&mut out, "a\"b\\c\nd\te\u{1}f é 中文 😀");
        assert_eq!(out, r#""a\"b\\c\nd\te\u0001f é 中文 😀""#);
    }
}
