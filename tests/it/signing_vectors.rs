//! The signing primitive against RFC 8032's test vectors, and our signed
//! vectors in `fixtures/signed/`: every positive envelope of the fixtures'
//! single list (as `fixtures/MANIFEST.tsv` names it), signed with a fixed
//! seed without and with a SignatureContext, so other AGDX implementations
//! can check their signatures byte for byte.
//!
//! Regenerating is explicit:
//! `AGDX_REGENERATE_FIXTURES=1 cargo test --test it signing_vectors::`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use agdx::trust::{KeyEntry, KeyKind, KeyRegistry, Observed, PublicKey, Signer, Verifier};
use agdx::wire::{AgentEnvelope, ContentType, SignatureContext, WIRE_VERSION, signing_input};
use serde::{Deserialize, Serialize};

fn unhex<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0; N];
    hex::decode_to_slice(text, &mut out).expect("hex of the right length");
    out
}

/// RFC 8032 §7.1: secret key (seed), public key, message, signature.
const RFC8032: &[(&str, &str, &str, &str)] = &[
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
    (
        // TEST SHA(abc): a 64-byte message.
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    ),
];

#[test]
fn the_primitive_matches_rfc_8032() {
    for (seed, public, message, signature) in RFC8032 {
        let signer = Signer::from_seed(&unhex::<32>(seed));
        assert_eq!(signer.public_key().to_string(), *public);
        let message = hex::decode(message).unwrap();
        let made = signer.sign_bytes(&message);
        assert_eq!(hex::encode(made), *signature, "seed {seed}");
        let key: PublicKey = public.parse().unwrap();
        assert!(key.verify(&message, &made));
        let mut altered = message.clone();
        altered.push(0);
        assert!(!key.verify(&altered, &made), "another message");
        let mut flipped = made;
        flipped[5] ^= 1;
        assert!(!key.verify(&message, &flipped), "a changed signature");
    }
}

/// The group order L, little-endian.
const ORDER: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

#[test]
fn verification_is_strict() {
    // A non-canonical S (S + L), which lax verifiers accept, is refused.
    let (_, public, message, signature) = RFC8032[1];
    let key: PublicKey = public.parse().unwrap();
    let mut malleated = unhex::<64>(signature);
    let mut carry = 0u16;
    for (s, l) in malleated[32..].iter_mut().zip(ORDER) {
        let sum = u16::from(*s) + u16::from(l) + carry;
        *s = sum as u8;
        carry = sum >> 8;
    }
    let message = hex::decode(message).unwrap();
    assert!(!key.verify(&message, &malleated), "S + L is refused");
    assert!(key.verify(&message, &unhex::<64>(signature)));

    // Small-order public keys are refused before they can verify anything:
    // the identity, and a point of order 8.
    for weak in [
        format!("01{}", "00".repeat(31)),
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa".to_owned(),
    ] {
        let error = weak.parse::<PublicKey>().unwrap_err();
        assert_eq!(error, agdx::trust::PublicKeyError::Weak, "{weak}");
    }
}

/// One signed vector as `fixtures/signed/VECTORS.json` lists it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Vector {
    /// The signed envelope, in `fixtures/`.
    file: String,
    /// The fixture it signs, in `fixtures/`.
    signs: String,
    seed: String,
    public_key: String,
    key_id: String,
    /// The CBOR of the bound SignatureContext, hex; absent without one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    context: Option<String>,
    signing_input: String,
    signature: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Vectors {
    about: String,
    vectors: Vec<Vector>,
}

const ABOUT: &str = "Ed25519 signatures over the positive envelope fixtures (fixtures/MANIFEST.tsv), \
     one key for all. signing_input = \"agdx.signature.v1\" || context CBOR (when bound) || the \
     envelope encoded without its signature. Generated by tests/it/signing_vectors.rs; regenerate with \
     AGDX_REGENERATE_FIXTURES=1 cargo test --test it signing_vectors::";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The positive envelope fixtures, in the order of the single list.
fn envelope_fixtures() -> Vec<String> {
    let manifest = std::fs::read_to_string(fixtures().join("MANIFEST.tsv")).unwrap();
    manifest
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            (fields.get(1) == Some(&"envelope") && fields.get(2) == Some(&"valid"))
                .then(|| fields[0].trim_end_matches(".bin").to_owned())
        })
        .collect()
}

/// The body content type a producer would bind for a fixture's envelope.
fn content_type_of(envelope: &AgentEnvelope) -> ContentType {
    use agdx::wire::Kind;
    match (envelope.kind, envelope.operation.as_deref()) {
        (Kind::Error, _) | (Kind::Status, Some("card")) => ContentType::Cbor,
        (Kind::Event, _) => ContentType::Json,
        _ => ContentType::Raw,
    }
}

/// The seed every vector is signed with: bytes 0, 1, ..., 31.
fn seed() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

/// Builds every vector and its signed envelope bytes.
fn build() -> (Vectors, Vec<(String, Vec<u8>)>) {
    let signer = Signer::from_seed(&seed());
    let mut vectors = Vec::new();
    let mut files = Vec::new();
    for name in envelope_fixtures() {
        let bytes = std::fs::read(fixtures().join(format!("{name}.bin"))).unwrap();
        let envelope = AgentEnvelope::decode_valid(&bytes).unwrap();
        let bound = SignatureContext {
            content_type: Some(content_type_of(&envelope)),
            agent_version: Some(WIRE_VERSION),
        };
        for (suffix, context) in [("", None), ("_bound", Some(bound))] {
            let signed = signer.sign(envelope.clone(), context);
            let file = format!("signed/{name}{suffix}.bin");
            let signature = signed.signature.as_ref().unwrap();
            vectors.push(Vector {
                file: file.clone(),
                signs: format!("{name}.bin"),
                seed: hex::encode(seed()),
                public_key: signer.public_key().to_string(),
                key_id: signer.key_id().to_string(),
                context: context.map(|c| hex::encode(c.encode())),
                signing_input: hex::encode(signing_input(&signed)),
                signature: hex::encode(&signature.bytes),
            });
            files.push((file, signed.encode()));
        }
    }
    (
        Vectors {
            about: ABOUT.to_owned(),
            vectors,
        },
        files,
    )
}

fn vectors_json(vectors: &Vectors) -> String {
    let mut text = serde_json::to_string_pretty(vectors).unwrap();
    text.push('\n');
    text
}

#[test]
fn signed_vectors_match_what_the_fixture_list_builds_and_verify() {
    let (vectors, files) = build();
    let dir = fixtures().join("signed");
    if std::env::var_os("AGDX_REGENERATE_FIXTURES").is_some_and(|v| v == "1") {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, bytes) in &files {
            std::fs::write(fixtures().join(file), bytes).unwrap();
        }
        std::fs::write(dir.join("VECTORS.json"), vectors_json(&vectors)).unwrap();
        println!(
            "regenerated {} signed vectors in {}",
            files.len(),
            dir.display()
        );
        return;
    }
    let regenerate = "if the change is intended, regenerate with AGDX_REGENERATE_FIXTURES=1 cargo test --test it signing_vectors::";
    let written = std::fs::read_to_string(dir.join("VECTORS.json")).unwrap();
    assert_eq!(
        written,
        vectors_json(&vectors),
        "VECTORS.json is stale; {regenerate}"
    );
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| format!("signed/{}", e.unwrap().file_name().into_string().unwrap()))
        .filter(|n| n.ends_with(".bin"))
        .collect();
    let listed: BTreeSet<String> = files.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(
        on_disk, listed,
        "signed vector files on disk and in the list differ; {regenerate}"
    );
    assert!(vectors.vectors.iter().any(|v| v.context.is_some()));
    assert!(vectors.vectors.iter().any(|v| v.context.is_none()));

    for (vector, (file, built)) in vectors.vectors.iter().zip(&files) {
        let bytes = std::fs::read(fixtures().join(file)).unwrap();
        assert!(
            &bytes == built,
            "{file} differs from what the list builds; {regenerate}"
        );
        // The envelope re-encodes to itself, carries the listed signature
        // over the listed input, and the public key checks it.
        let envelope = AgentEnvelope::decode_valid(&bytes).unwrap();
        assert_eq!(envelope.encode(), bytes, "{file} is canonical");
        assert_eq!(hex::encode(signing_input(&envelope)), vector.signing_input);
        let key: PublicKey = vector.public_key.parse().unwrap();
        assert_eq!(key.key_id().to_string(), vector.key_id);
        let signature = unhex::<64>(&vector.signature);
        assert!(
            key.verify(&hex::decode(&vector.signing_input).unwrap(), &signature),
            "{file}"
        );

        // The whole verifier accepts it for its source, and refuses any change.
        let mut registry = KeyRegistry::new();
        registry
            .insert(KeyEntry::new(
                envelope.source.clone(),
                KeyKind::Agent,
                key,
                None,
                None,
            ))
            .unwrap();
        let verifier = Verifier::new(registry);
        let verified = verifier.verify(&bytes, &Observed::file(0)).unwrap();
        assert_eq!(verified.principal, envelope.source);
        let mut changed = envelope.clone();
        changed.body = [&changed.body[..], b"!"].concat().into();
        assert!(
            verifier
                .verify(&changed.encode(), &Observed::file(0))
                .is_err(),
            "{file} changed"
        );
    }
}
