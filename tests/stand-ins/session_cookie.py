"""lua-resty-session 4's cookie (Kong 3.x's `session` plugin), written from
the library's documented format with the `cryptography` package, as a
reference the gateway's cookies are checked against.

  seal SECRET JSON_ENTRIES NOW    -> prints the cookie value (cookie storage)
  open SECRET COOKIE_VALUE NOW    -> prints the entries (JSON) or exits 1

Header (82 bytes, little-endian): type 1 (1), flags (2), sid (32), creation
time (5), rolling offset (4), data size (3), GCM tag (16), idling offset (3),
MAC (16). IKM = SHA-256(secret); HKDF-SHA256 (empty salt), info
`encryption:<sid>` -> AES-256-GCM key (32) + IV (12), AAD = header[0:47];
info `authentication:<sid>` -> HMAC-SHA256 key, MAC over header[0:66], 16 bytes.
"""
import base64
import hashlib
import hmac
import os
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def b64e(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64d(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derive(ikm, usage, sid, size):
    return HKDF(algorithm=hashes.SHA256(), length=size, salt=None, info=usage + b":" + sid).derive(ikm)


def seal(secret, plaintext, now):
    ikm = hashlib.sha256(secret.encode()).digest()
    sid = os.urandom(32)
    key_iv = derive(ikm, b"encryption", sid, 44)
    # The ciphertext has the plaintext's length; its base64url length goes in the header.
    data_size = -(-4 * len(plaintext) // 3)
    header = bytes([1]) + (0).to_bytes(2, "little") + sid + now.to_bytes(5, "little")
    header += (0).to_bytes(4, "little") + data_size.to_bytes(3, "little")
    sealed = AESGCM(key_iv[:32]).encrypt(key_iv[32:], plaintext, header)
    ciphertext, tag = sealed[:-16], sealed[-16:]
    header += tag + (0).to_bytes(3, "little")
    mac_key = derive(ikm, b"authentication", sid, 32)
    header += hmac.new(mac_key, header, hashlib.sha256).digest()[:16]
    return b64e(header) + b64e(ciphertext)


def open_(secret, value):
    ikm = hashlib.sha256(secret.encode()).digest()
    header = b64d(value[:110])
    assert len(header) == 82 and header[0] == 1, "header"
    sid = header[3:35]
    mac_key = derive(ikm, b"authentication", sid, 32)
    assert hmac.compare_digest(hmac.new(mac_key, header[:66], hashlib.sha256).digest()[:16], header[66:]), "mac"
    data_size = int.from_bytes(header[44:47], "little")
    payload = value[110:]
    assert len(payload) == data_size, "size"
    key_iv = derive(ikm, b"encryption", sid, 44)
    return AESGCM(key_iv[:32]).decrypt(key_iv[32:], b64d(payload) + header[47:63], header[:47])


if __name__ == "__main__":
    command, secret, text, now = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if command == "seal":
        print(seal(secret, text.encode(), now))
    else:
        try:
            print(open_(secret, text).decode())
        except Exception as error:  # noqa: BLE001 - any failure means "does not open"
            print(f"does not open: {error!r}", file=sys.stderr)
            sys.exit(1)
