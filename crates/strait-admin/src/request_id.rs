//! `X-Kong-Admin-Request-ID`.

use http::HeaderValue;
use strait_runtime::random::next_u64;

/// An Admin API request id as Kong writes `X-Kong-Admin-Request-ID`: 32
/// letters and digits.
pub fn admin_request_id() -> HeaderValue {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut chars = [0u8; 32];
    for pair in chars.chunks_mut(8) {
        let mut word = next_u64();
        for char in pair {
            *char = ALPHABET[(word % 62) as usize];
            word /= 62;
        }
    }
    HeaderValue::from_bytes(&chars).expect("letters and digits are a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_request_ids_are_32_letters_and_digits() {
        let id = admin_request_id();
        assert_eq!(id.len(), 32);
        assert!(id.as_bytes().iter().all(u8::is_ascii_alphanumeric));
        assert_ne!(id, admin_request_id());
    }
}
