//! The object store blob store: one object per blob, named by its SHA-256,
//! under a prefix of an S3 bucket, a GCS bucket, an Azure container or a
//! local directory (through the `object_store` crate).

use std::sync::Arc;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutPayload};

use super::{BlobError, BlobSpecError, BlobStore, MAX_BLOB_CHUNK_BYTES, MAX_BLOB_CHUNKS};

/// The largest blob read back: the log blob store's bound, so a reference
/// to an unexpectedly large object cannot fill the reader's memory.
const MAX_OBJECT_BYTES: u64 = MAX_BLOB_CHUNKS as u64 * MAX_BLOB_CHUNK_BYTES as u64;

/// What the object blob store reads for its errors.
const STORE: &str = "object blob store";

/// A blob store in an object store (see the module docs).
///
/// A reference is the store's URL, a slash, and the blob's SHA-256 in
/// lower-case hex: `s3://bucket/prefix/<64 hex digits>`. A reader only
/// reads references under its own URL, so a record cannot make it fetch
/// from a store it was not given.
#[derive(Debug, Clone)]
pub struct ObjectBlobStore {
    store: Arc<dyn ObjectStore>,
    /// The prefix inside the store.
    prefix: Path,
    /// The store's URL without a trailing slash.
    url: String,
}

impl ObjectBlobStore {
    /// Opens the store a URL names: `s3://bucket/prefix`,
    /// `gs://bucket/prefix`, `az://container/prefix` (each configured from
    /// the environment, as [`BlobSpec::Object`](super::BlobSpec::Object)
    /// lists) or `file:///path` (a local directory, made when missing).
    pub fn open(url: &str) -> Result<Self, BlobSpecError> {
        Self::open_with(url, std::iter::empty::<(&str, &str)>())
    }

    /// [`ObjectBlobStore::open`] with settings that take precedence over
    /// the environment's, by the names `object_store` gives them (e.g.
    /// `("aws_endpoint", "http://127.0.0.1:9000")`, `("aws_allow_http",
    /// "true")`, `("aws_access_key_id", ...)`); they are ignored for
    /// `file://`.
    pub fn open_with<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, BlobSpecError> {
        let failed = |source| BlobSpecError::Object {
            url: url.to_owned(),
            source,
        };
        let generic = |why: String| {
            failed(object_store::Error::Generic {
                store: "url",
                source: why.into(),
            })
        };
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.into()))
            .collect();
        let parsed = url::Url::parse(url).map_err(|e| generic(e.to_string()))?;
        let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| failed(e.into()))?;
        // Each builder reads the environment, then the URL, then `options`.
        macro_rules! build {
            ($builder:ty) => {{
                let mut builder = <$builder>::from_env().with_url(url);
                for (key, value) in &options {
                    builder = builder.with_config(key.parse().map_err(failed)?, value);
                }
                Arc::new(builder.build().map_err(failed)?) as Arc<dyn ObjectStore>
            }};
        }
        let store = match scheme {
            ObjectStoreScheme::AmazonS3 => build!(object_store::aws::AmazonS3Builder),
            ObjectStoreScheme::GoogleCloudStorage => {
                build!(object_store::gcp::GoogleCloudStorageBuilder)
            }
            ObjectStoreScheme::MicrosoftAzure => build!(object_store::azure::MicrosoftAzureBuilder),
            ObjectStoreScheme::Local => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| generic(format!("{url} is not a local path")))?;
                std::fs::create_dir_all(&dir).map_err(|source| BlobSpecError::Dir {
                    dir: dir.clone(),
                    source,
                })?;
                let store =
                    object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(failed)?;
                return Ok(Self::new(Arc::new(store), Path::ROOT, url));
            }
            other => return Err(generic(format!("{other:?} is not a blob store agdx opens"))),
        };
        let prefix = Path::parse(path).map_err(|e| failed(e.into()))?;
        Ok(Self::new(store, prefix, url))
    }

    /// A store in `store` under `prefix`, whose references start with `url`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, url: &str) -> Self {
        Self {
            store,
            prefix,
            url: url.trim_end_matches('/').to_owned(),
        }
    }

    /// The object of a reference, when it is one of this store's.
    fn location(&self, reference: &str) -> Result<Path, BlobError> {
        let bad = |why: String| BlobError::BadReference {
            reference: reference.to_owned(),
            store: STORE,
            why,
        };
        let hex = reference
            .strip_prefix(self.url.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| {
                bad(format!(
                    "it is not under {}, the store this reader uses; give the reader the store the sender used",
                    self.url
                ))
            })?;
        let well_formed = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        if !well_formed {
            return Err(bad(format!(
                "expected {}/<64 lower-case hex digits of the SHA-256>",
                self.url
            )));
        }
        Ok(self.prefix.clone().join(hex))
    }

    fn failed(&self, source: object_store::Error) -> BlobError {
        BlobError::ObjectStore {
            store: self.url.clone(),
            source,
        }
    }
}

#[async_trait]
impl BlobStore for ObjectBlobStore {
    async fn put(&self, bytes: Vec<u8>, sha256: [u8; 32]) -> Result<String, BlobError> {
        let reference = format!("{}/{}", self.url, hex::encode(sha256));
        let location = self.location(&reference)?;
        // Content-addressed: writing the same blob again writes the same bytes.
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .map_err(|e| self.failed(e))?;
        Ok(reference)
    }

    async fn get(&self, reference: &str) -> Result<Vec<u8>, BlobError> {
        let location = self.location(reference)?;
        let found = match self.store.get(&location).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(BlobError::Missing {
                    reference: reference.to_owned(),
                    store: self.url.clone(),
                });
            }
            Err(e) => return Err(self.failed(e)),
        };
        if found.meta.size > MAX_OBJECT_BYTES {
            return Err(BlobError::TooLarge {
                size: found.meta.size,
                limit: MAX_OBJECT_BYTES,
                store: STORE,
            });
        }
        let bytes = found.bytes().await.map_err(|e| self.failed(e))?;
        Ok(bytes.to_vec())
    }
}
