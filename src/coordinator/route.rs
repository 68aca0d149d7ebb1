//! Queue routing: which queue of a topic an event goes to.
//!
//! `queue = hash(biz_key) mod queue_count`, where `queue_count` is pinned in
//! configuration (or at first start, in the checkpoint), never taken from the live
//! route list: that list shrinks while a broker is down, and a remap would send one
//! key's events to two queues and break its order.
//!
//! The default hash is CRC-32 (IEEE 802.3, the zlib / `java.util.zip.CRC32` one) of the
//! biz_key's UTF-8 bytes, as an unsigned 32-bit number, so any producer in any
//! language can compute the same queue:
//! `queue = crc32(biz_key.getBytes(UTF_8)) % queue_count`.
//! For fleets whose Java producers use `SelectMessageQueueByHash`, the
//! `java_string_hash` option reproduces it: `abs(biz_key.hashCode() % queue_count)`.

use crate::config::HashFunction;

/// The queue index in `0..queue_count` for `biz_key`.
pub fn queue_for(hash: HashFunction, biz_key: &str, queue_count: u32) -> u32 {
    debug_assert!(queue_count > 0, "queue_count is validated to be at least 1");
    let count = queue_count.max(1);
    match hash {
        HashFunction::Stable => crc32fast::hash(biz_key.as_bytes()) % count,
        HashFunction::JavaStringHash => java_select_by_hash(biz_key, count),
    }
}

/// `SelectMessageQueueByHash.select`: `value = arg.hashCode() % size; if (value < 0) value = Math.abs(value)`.
fn java_select_by_hash(key: &str, count: u32) -> u32 {
    let value = java_string_hash_code(key) % count as i32;
    value.unsigned_abs()
}

/// `java.lang.String.hashCode`: `h = 31 * h + c` over UTF-16 code units, wrapping.
fn java_string_hash_code(key: &str) -> i32 {
    key.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_crc32_with_fixed_vectors() {
        // Standard CRC-32 check values: any other implementation can verify them.
        for (key, crc) in [("", 0u32), ("a", 0xE8B7_BE43), ("123456789", 0xCBF4_3926)] {
            assert_eq!(crc32fast::hash(key.as_bytes()), crc, "crc32({key:?})");
        }
        assert_eq!(queue_for(HashFunction::Stable, "123456789", 8), 0xCBF4_3926 % 8);
        assert_eq!(queue_for(HashFunction::Stable, "a", 16), 0xE8B7_BE43 % 16);
    }

    #[test]
    fn stable_hash_does_not_change_between_calls_or_builds() {
        let fixed = [("order-1", 8, 7), ("order-2", 8, 5), ("user:42", 16, 6), ("订单-7", 8, 1)];
        for (key, count, expected) in fixed {
            assert_eq!(queue_for(HashFunction::Stable, key, count), expected, "{key}");
        }
    }

    #[test]
    fn java_hash_matches_string_hash_code() {
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("hello"), 99_162_322);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: abs of the remainder, not of the hash.
        assert_eq!(java_string_hash_code("polygenelubricants"), i32::MIN);
        assert_eq!(queue_for(HashFunction::JavaStringHash, "polygenelubricants", 7), (i32::MIN % 7).unsigned_abs());
        assert_eq!(queue_for(HashFunction::JavaStringHash, "hello", 8), 99_162_322 % 8);
    }

    #[test]
    fn every_queue_is_reachable_and_in_range() {
        let mut seen = [false; 8];
        for i in 0..1000 {
            let q = queue_for(HashFunction::Stable, &format!("key-{i}"), 8);
            seen[q as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
