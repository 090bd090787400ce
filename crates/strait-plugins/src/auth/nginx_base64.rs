//! Base64 decoding the way nginx does it (`ngx.decode_base64` and
//! `ngx.base64.decode_base64url`, which Kong's jwt and hmac-auth plugins
//! use): decoding stops at the first `=`, padding is optional, unused
//! trailing bits are ignored, and a length of 4n+1 symbols is refused.
//! Matching this leniency keeps tokens and signatures that Kong accepts
//! acceptable here, and refuses the ones Kong refuses.

use base64::alphabet::{Alphabet, STANDARD, URL_SAFE};
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

fn lenient(alphabet: &Alphabet) -> GeneralPurpose {
    let config = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true);
    GeneralPurpose::new(alphabet, config)
}

fn decode_with(engine: &GeneralPurpose, text: &str) -> Option<Vec<u8>> {
    let symbols = text.split('=').next().unwrap_or("");
    engine.decode(symbols).ok()
}

/// `ngx.decode_base64`: the standard alphabet (`+`, `/`).
pub(crate) fn decode_standard(text: &str) -> Option<Vec<u8>> {
    decode_with(&lenient(&STANDARD), text)
}

/// `ngx.base64.decode_base64url`: the URL-safe alphabet (`-`, `_`).
pub(crate) fn decode_url(text: &str) -> Option<Vec<u8>> {
    decode_with(&lenient(&URL_SAFE), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_optional_and_ends_the_input() {
        assert_eq!(decode_url("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_url("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_url("aGk=garbage!").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_url("").as_deref(), Some(&b""[..]));
    }

    #[test]
    fn alphabets_and_lengths() {
        assert_eq!(decode_url("-_8").as_deref(), Some(&[0xfb, 0xff][..]));
        assert_eq!(decode_url("+/8"), None);
        assert_eq!(decode_standard("+/8=").as_deref(), Some(&[0xfb, 0xff][..]));
        assert_eq!(decode_standard("-_8"), None);
        assert_eq!(decode_url("abcde"), None, "4n+1 symbols");
        assert_eq!(decode_url("a.b"), None);
        // Unused trailing bits are ignored, as nginx does.
        assert_eq!(decode_url("aGl").as_deref(), Some(&b"hi"[..]));
    }
}
