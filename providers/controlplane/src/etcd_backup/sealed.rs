//! The sealed format of an encrypted snapshot: encrypt-then-MAC with keys of its own, so that a node can
//! check and open it with `openssl` alone when it restores, given only that object's keys.
//!
//! ```text
//! "KPSEAL1\n" (8 bytes) | salt (32 random bytes) | AES-256-CTR ciphertext | HMAC-SHA-256 tag (32 bytes)
//! ```
//!
//! The object's keys come from the key in the Secret and the salt by HKDF-SHA-256 (info
//! [`INFO`]): 32 bytes of cipher key, 16 of initial counter block (big-endian, as `openssl enc
//! -aes-256-ctr` counts), 32 of MAC key. The tag authenticates everything before it. A fresh salt per
//! snapshot gives every snapshot keys of its own, so a counter never repeats under one cipher key and
//! handing a node the keys of one snapshot opens no other.

use ctr::cipher::{KeyIvInit, StreamCipher};
use ring::{digest, hkdf, hmac};

/// What a manifest names the format.
pub const ALGORITHM: &str = "aes-256-ctr+hmac-sha256/hkdf-sha256";
/// The first bytes of a sealed object.
pub const MAGIC: &[u8; 8] = b"KPSEAL1\n";
pub const SALT_LEN: usize = 32;
pub const HEADER_LEN: usize = MAGIC.len() + SALT_LEN;
pub const TAG_LEN: usize = 32;
/// HKDF's info: binds the derived keys to this format.
pub const INFO: &[u8] = b"kubeadm-providers etcd snapshot sealing v1";

type Aes256Ctr = ctr::Ctr128BE<aes::Aes256>;

/// A 32-byte key from a Secret.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", fingerprint(self))
    }
}

impl Key {
    /// The key from a Secret's value: 32 bytes, or their base64 (standard alphabet, surrounding
    /// whitespace ignored). An error says what was found, never the value.
    pub fn from_secret_value(value: &[u8]) -> Result<Self, String> {
        use base64::Engine;
        if let Ok(raw) = <[u8; 32]>::try_from(value) {
            return Ok(Self(raw));
        }
        let text = std::str::from_utf8(value).map(str::trim).unwrap_or("");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok());
        decoded.map(Self).ok_or_else(|| {
            format!(
                "the encryption key must be 32 bytes, or their base64 (e.g. `openssl rand -base64 32`); \
                 the Secret holds {} bytes that are neither",
                value.len()
            )
        })
    }

    #[cfg(test)]
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

/// A short public name of a key: the first 8 bytes of SHA-256 over a label and the key, in hex.
pub fn fingerprint(key: &Key) -> String {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(b"kubeadm-providers key fingerprint\n");
    context.update(&key.0);
    hex(&context.finish().as_ref()[..8])
}

/// The keys of one sealed object.
#[derive(Clone)]
pub struct ObjectKeys {
    pub cipher: [u8; 32],
    pub counter: [u8; 16],
    pub mac: [u8; 32],
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl ObjectKeys {
    /// The keys of the object whose salt is `salt`.
    pub fn derive(key: &Key, salt: &[u8; SALT_LEN]) -> Self {
        let mut out = [0u8; 80];
        hkdf::Salt::new(hkdf::HKDF_SHA256, salt)
            .extract(&key.0)
            .expand(&[INFO], Len(out.len()))
            .and_then(|okm| okm.fill(&mut out))
            .expect("80 bytes are within what HKDF-SHA-256 gives");
        let mut keys = Self {
            cipher: [0; 32],
            counter: [0; 16],
            mac: [0; 32],
        };
        keys.cipher.copy_from_slice(&out[..32]);
        keys.counter.copy_from_slice(&out[32..48]);
        keys.mac.copy_from_slice(&out[48..]);
        keys
    }

    fn cipher(&self) -> Aes256Ctr {
        Aes256Ctr::new_from_slices(&self.cipher, &self.counter).expect("key and counter sizes")
    }
}

/// Seals a stream: [`Sealer::header`] first, then each chunk through [`Sealer::seal`], then the tag of
/// [`Sealer::finish`].
pub struct Sealer {
    header: [u8; HEADER_LEN],
    cipher: Aes256Ctr,
    mac: hmac::Context,
}

impl Sealer {
    /// A sealer with a fresh random salt.
    pub fn new(key: &Key) -> Result<Self, String> {
        let mut salt = [0u8; SALT_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| "no random bytes from the system for the snapshot's salt".to_owned())?;
        Ok(Self::with_salt(key, salt))
    }

    fn with_salt(key: &Key, salt: [u8; SALT_LEN]) -> Self {
        let keys = ObjectKeys::derive(key, &salt);
        let mut header = [0u8; HEADER_LEN];
        header[..MAGIC.len()].copy_from_slice(MAGIC);
        header[MAGIC.len()..].copy_from_slice(&salt);
        let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, &keys.mac));
        mac.update(&header);
        Self {
            header,
            cipher: keys.cipher(),
            mac,
        }
    }

    /// The bytes the object starts with.
    pub fn header(&self) -> &[u8; HEADER_LEN] {
        &self.header
    }

    /// Encrypts `chunk` in place (the next bytes of the stream).
    pub fn seal(&mut self, chunk: &mut [u8]) {
        self.cipher.apply_keystream(chunk);
        self.mac.update(chunk);
    }

    /// The tag the object ends with.
    pub fn finish(self) -> [u8; TAG_LEN] {
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(self.mac.sign().as_ref());
        tag
    }
}

/// Opens a sealed stream fed in pieces of any size: [`Opener::open`] gives the plaintext of what is
/// surely not the tag (the last 32 bytes are held back), [`Opener::finish`] checks the tag. Nothing it
/// gave may be trusted before `finish` succeeds.
pub struct Opener {
    key: Key,
    header: Vec<u8>,
    state: Option<(Aes256Ctr, hmac::Context)>,
    keys: Option<ObjectKeys>,
    held: Vec<u8>,
}

impl Opener {
    pub fn new(key: &Key) -> Self {
        Self {
            key: key.clone(),
            header: Vec::with_capacity(HEADER_LEN),
            state: None,
            keys: None,
            held: Vec::with_capacity(2 * TAG_LEN),
        }
    }

    /// The plaintext of the next bytes of the stream that are surely not the tag.
    pub fn open(&mut self, mut input: &[u8]) -> Result<Vec<u8>, String> {
        if self.state.is_none() {
            let wanted = HEADER_LEN - self.header.len();
            let (head, rest) = input.split_at(wanted.min(input.len()));
            self.header.extend_from_slice(head);
            input = rest;
            if self.header.len() < HEADER_LEN {
                return Ok(Vec::new());
            }
            if &self.header[..MAGIC.len()] != MAGIC {
                return Err("not a sealed snapshot: it does not start with the sealed format's marker (is it encrypted?)".into());
            }
            let mut salt = [0u8; SALT_LEN];
            salt.copy_from_slice(&self.header[MAGIC.len()..]);
            let keys = ObjectKeys::derive(&self.key, &salt);
            let mut mac = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, &keys.mac));
            mac.update(&self.header);
            self.state = Some((keys.cipher(), mac));
            self.keys = Some(keys);
        }
        self.held.extend_from_slice(input);
        let ready = self.held.len().saturating_sub(TAG_LEN);
        let mut out: Vec<u8> = self.held.drain(..ready).collect();
        let (cipher, mac) = self.state.as_mut().expect("set above");
        mac.update(&out);
        cipher.apply_keystream(&mut out);
        Ok(out)
    }

    /// The keys of this object, once its header is in: what a node needs to check and open it.
    pub fn keys(&self) -> Option<&ObjectKeys> {
        self.keys.as_ref()
    }

    /// Checks the tag at the end of the stream.
    pub fn finish(self) -> Result<(), String> {
        let Some((_, mac)) = self.state else {
            return Err("the sealed snapshot ends within its header".into());
        };
        if self.held.len() != TAG_LEN {
            return Err("the sealed snapshot ends before its tag".into());
        }
        let expected = mac.sign();
        // Compared without an early exit, so the time taken says nothing of where they differ.
        let differ = expected
            .as_ref()
            .iter()
            .zip(&self.held)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differ != 0 {
            return Err(
                "the sealed snapshot fails authentication: a different key sealed it, or it was altered"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Key {
        Key::from_bytes([byte; 32])
    }

    fn seal_all(key: &Key, plain: &[u8], chunk: usize) -> Vec<u8> {
        let mut sealer = Sealer::new(key).unwrap();
        let mut out = sealer.header().to_vec();
        for piece in plain.chunks(chunk.max(1)) {
            let mut piece = piece.to_vec();
            sealer.seal(&mut piece);
            out.extend_from_slice(&piece);
        }
        out.extend_from_slice(&sealer.finish());
        out
    }

    fn open_all(key: &Key, sealed: &[u8], chunk: usize) -> Result<Vec<u8>, String> {
        let mut opener = Opener::new(key);
        let mut out = Vec::new();
        for piece in sealed.chunks(chunk.max(1)) {
            out.extend(opener.open(piece)?);
        }
        opener.finish()?;
        Ok(out)
    }

    #[test]
    fn a_sealed_stream_opens_whole_whatever_the_pieces() {
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (seal_chunk, open_chunk) in [(1, 100_000), (4096, 1), (65536, 33), (7, 40)] {
            let sealed = seal_all(&key(1), &plain, seal_chunk);
            assert_eq!(sealed.len(), HEADER_LEN + plain.len() + TAG_LEN);
            assert_ne!(&sealed[HEADER_LEN..HEADER_LEN + 64], &plain[..64]);
            assert_eq!(open_all(&key(1), &sealed, open_chunk).unwrap(), plain);
        }
        // Empty plaintext: header and tag only.
        let sealed = seal_all(&key(1), &[], 1);
        assert_eq!(open_all(&key(1), &sealed, 3).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn every_snapshot_gets_keys_of_its_own() {
        let a = seal_all(&key(1), b"same database", 64);
        let b = seal_all(&key(1), b"same database", 64);
        assert_ne!(a[HEADER_LEN..], b[HEADER_LEN..], "a fresh salt each time");
    }

    #[test]
    fn a_wrong_key_an_altered_byte_or_a_cut_stream_is_refused() {
        let plain = vec![42u8; 10_000];
        let sealed = seal_all(&key(1), &plain, 1000);
        let wrong = open_all(&key(2), &sealed, 512).unwrap_err();
        assert!(wrong.contains("fails authentication"), "{wrong}");
        for at in [0, 9, HEADER_LEN + 5, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            let error = open_all(&key(1), &altered, 512).unwrap_err();
            assert!(
                error.contains("fails authentication") || error.contains("marker"),
                "byte {at}: {error}"
            );
        }
        let cut = open_all(&key(1), &sealed[..sealed.len() - 40], 512).unwrap_err();
        assert!(cut.contains("fails authentication"), "{cut}");
        let stub = open_all(&key(1), &sealed[..20], 512).unwrap_err();
        assert!(stub.contains("within its header"), "{stub}");
    }

    #[test]
    fn keys_come_raw_or_in_base64_and_errors_never_show_them() {
        assert_eq!(
            fingerprint(&Key::from_secret_value(&[9u8; 32]).unwrap()),
            fingerprint(&key(9))
        );
        let encoded = "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=\n";
        assert_eq!(
            fingerprint(&Key::from_secret_value(encoded.as_bytes()).unwrap()),
            fingerprint(&key(9))
        );
        let error = Key::from_secret_value(b"hunter2-too-short").unwrap_err();
        assert!(
            error.contains("32 bytes") && !error.contains("hunter2"),
            "{error}"
        );
        assert_ne!(fingerprint(&key(1)), fingerprint(&key(2)));
        assert_eq!(fingerprint(&key(1)).len(), 16);
    }

    /// A node opens a sealed snapshot with `openssl` and the object's keys alone, as the restore's
    /// bootstrap script does: the tag checked with `openssl dgst -hmac`, then `openssl enc -d`.
    #[test]
    fn openssl_checks_and_opens_a_sealed_snapshot_with_the_objects_keys() {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        let plain: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let sealed = seal_all(&key(5), &plain, 65536);
        let file = dir.path().join("snapshot.db.sealed");
        std::fs::write(&file, &sealed).unwrap();
        let mut salt = [0u8; SALT_LEN];
        salt.copy_from_slice(&sealed[MAGIC.len()..HEADER_LEN]);
        let keys = ObjectKeys::derive(&key(5), &salt);
        let script = format!(
            "set -eu\n\
             size=$(stat -c %s \"$1\")\n\
             body=$((size - {TAG_LEN}))\n\
             want=$(tail -c {TAG_LEN} \"$1\" | od -An -v -tx1 | tr -d ' \\n')\n\
             got=$(head -c \"$body\" \"$1\" | openssl dgst -sha256 -mac HMAC -macopt hexkey:{mac} -r | cut -d' ' -f1)\n\
             [ \"$got\" = \"$want\" ] || {{ echo 'tag mismatch' >&2; exit 1; }}\n\
             head -c \"$body\" \"$1\" | tail -c +{skip} | openssl enc -d -aes-256-ctr -K {cipher} -iv {counter} > \"$2\"\n",
            mac = hex(&keys.mac),
            cipher = hex(&keys.cipher),
            counter = hex(&keys.counter),
            skip = HEADER_LEN + 1,
        );
        let opened = dir.path().join("snapshot.db");
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg("sh")
            .arg(&file)
            .arg(&opened)
            .output()
            .expect("sh and openssl (hack/install-testenv.sh installs openssl)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::read(&opened).unwrap(), plain);
    }
}
