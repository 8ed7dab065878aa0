//! # riptide-s3
//!
//! The object tier of Riptide ([`riptide::tier`]) on S3 and S3-compatible stores (MinIO,
//! Ceph RGW, moto), through the `object_store` crate.
//!
//! ```no_run
//! use riptide::{tier::Tier, Db, Options};
//! use riptide_s3::{S3Options, S3Store};
//! use std::sync::Arc;
//!
//! // Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//! // AWS_SESSION_TOKEN, AWS_REGION, web identity, ECS or EC2 instance metadata).
//! let store = S3Store::new(S3Options::new("s3://my-bucket/orders-db"))?;
//! let db = Db::open(
//!     "/var/lib/orders",
//!     Options { object_store: Some(Arc::new(store)), l2_tier: Tier::Object, ..Default::default() },
//! )?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Invariants:
//! - [`S3Store`] implements the engine's synchronous [`ObjectStore`] on its own tokio runtime:
//!   each call is spawned there and the calling thread waits for its answer, so it may be
//!   called from any thread, including another runtime's (the server's) worker threads.
//! - `object_store`'s own retries are off: the engine retries transient errors under its
//!   [`riptide::tier::RetryPolicy`], so one deadline bounds a request. Each attempt is bounded
//!   by [`S3Options::request_timeout`].
//! - Errors are classified: 404 is `NotFound`; timeouts, connection failures, 5xx, 429 and 408
//!   are `Transient`; other 4xx, bad paths and bad configuration are `Permanent`.
//! - Dropping a store never blocks (its runtime shuts down in the background), so it may be
//!   dropped inside another runtime.
//! - Credentials never come from the database directory: explicit [`S3Options::credentials`]
//!   or the standard environment chain.

pub mod fault_proxy;
pub mod moto;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore as _, ObjectStoreExt as _, RetryConfig};
use riptide::tier::{check_object_name, ObjectError, ObjectErrorKind, ObjectInfo, ObjectResult, ObjectStore};
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How to reach an S3 bucket.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// `s3://bucket` or `s3://bucket/prefix`: every object of the database lives under the
    /// prefix.
    pub url: String,
    /// Endpoint of an S3-compatible service (`http://127.0.0.1:9000`); `None` = AWS (or the
    /// `AWS_ENDPOINT` environment variable). Requests use path-style addressing with an
    /// endpoint.
    pub endpoint: Option<String>,
    /// Region; `None` = the environment's (`AWS_REGION`), else `us-east-1`.
    pub region: Option<String>,
    /// `(access key id, secret access key)`; `None` = the environment chain.
    pub credentials: Option<(String, String)>,
    /// Bound on one request attempt (default 10 s).
    pub request_timeout: Duration,
    /// Bound on connecting (default 3 s).
    pub connect_timeout: Duration,
}

impl S3Options {
    /// Options for `url` with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        S3Options {
            url: url.into(),
            endpoint: None,
            region: None,
            credentials: None,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

/// An S3 bucket (and prefix) as an object store for [`riptide::Options::object_store`].
pub struct S3Store {
    s3: Arc<AmazonS3>,
    prefix: String,
    location: String,
    /// Taken only by `Drop`.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for S3Store {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside another runtime's async context (a
        // database dropped in a server task); shutting it down in the background does not.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store").field("location", &self.location).finish()
    }
}

fn config_error(message: impl Into<String>) -> ObjectError {
    ObjectError::new(ObjectErrorKind::Permanent, message)
}

/// `(bucket, prefix)` of `s3://bucket/prefix`.
fn parse_url(url: &str) -> ObjectResult<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| config_error(format!("object store URL {url:?} does not start with s3://")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(config_error(format!("object store URL {url:?} names no bucket")));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

impl S3Store {
    /// Connects nothing yet: builds the client and its runtime. Errors: a malformed URL or
    /// configuration (`Permanent`).
    pub fn new(opts: S3Options) -> ObjectResult<Self> {
        let (bucket, prefix) = parse_url(&opts.url)?;
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(opts.request_timeout)
                    .with_connect_timeout(opts.connect_timeout)
                    .with_allow_http(opts.endpoint.as_deref().is_some_and(|e| e.starts_with("http://"))),
            );
        if let Some(e) = &opts.endpoint {
            b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
        }
        if let Some(r) = &opts.region {
            b = b.with_region(r);
        } else if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
            b = b.with_region("us-east-1");
        }
        if let Some((id, secret)) = &opts.credentials {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        let s3 = b.build().map_err(|e| config_error(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("riptide-s3")
            .enable_all()
            .build()
            .map_err(|e| config_error(format!("cannot start the S3 client's runtime: {e}")))?;
        let location = if prefix.is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        Ok(S3Store {
            s3: Arc::new(s3),
            prefix,
            location,
            runtime: Some(runtime),
        })
    }

    fn path(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix))
        }
    }

    /// Runs `fut` on the store's runtime and waits for it from this (any) thread.
    fn run<T: Send + 'static>(&self, fut: impl Future<Output = ObjectResult<T>> + Send + 'static) -> ObjectResult<T> {
        let Some(runtime) = &self.runtime else {
            return Err(ObjectError::new(
                ObjectErrorKind::Transient,
                "the S3 client is shutting down",
            ));
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(ObjectError::new(
                ObjectErrorKind::Transient,
                "the S3 client's runtime stopped",
            ))
        })
    }
}

/// Classifies an `object_store` error (see the crate invariants).
fn classify(e: &object_store::Error) -> ObjectErrorKind {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => return ObjectErrorKind::NotFound,
        E::Generic { .. } => {}
        _ => return ObjectErrorKind::Permanent,
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<object_store::client::HttpError>() {
            return ObjectErrorKind::Transient;
        }
        source = s.source();
    }
    let text = e.to_string();
    let status = text
        .split("status code: ")
        .nth(1)
        .and_then(|t| t.get(..3))
        .and_then(|t| t.parse::<u16>().ok());
    match status {
        Some(s) if s >= 500 || s == 429 || s == 408 => ObjectErrorKind::Transient,
        Some(_) => ObjectErrorKind::Permanent,
        // No status and no transport error: a response that could not be used (an error in a
        // 200 body, a cut-off stream). Retrying under the deadline is safe.
        None => ObjectErrorKind::Transient,
    }
}

fn map_err(e: object_store::Error) -> ObjectError {
    ObjectError::new(classify(&e), e.to_string())
}

impl ObjectStore for S3Store {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn put(&self, name: &str, data: &[u8]) -> ObjectResult<()> {
        check_object_name(name)?;
        let (s3, path, payload) = (self.s3.clone(), self.path(name), bytes::Bytes::copy_from_slice(data));
        self.run(async move { s3.put(&path, payload.into()).await.map(|_| ()).map_err(map_err) })
    }

    fn put_if_absent(&self, name: &str, data: &[u8]) -> ObjectResult<bool> {
        check_object_name(name)?;
        let (s3, path, payload) = (self.s3.clone(), self.path(name), bytes::Bytes::copy_from_slice(data));
        self.run(async move {
            let opts = object_store::PutOptions {
                mode: object_store::PutMode::Create,
                ..Default::default()
            };
            match s3.put_opts(&path, payload.into(), opts).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                Err(e) => Err(map_err(e)),
            }
        })
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> ObjectResult<Vec<u8>> {
        check_object_name(name)?;
        if range.start >= range.end {
            return Ok(Vec::new());
        }
        let (s3, path) = (self.s3.clone(), self.path(name));
        self.run(async move {
            let want = range.end - range.start;
            let b = s3.get_range(&path, range).await.map_err(map_err)?;
            if b.len() as u64 != want {
                return Err(ObjectError::new(
                    ObjectErrorKind::Transient,
                    format!("ranged GET returned {} bytes, asked for {want}", b.len()),
                ));
            }
            Ok(b.to_vec())
        })
    }

    fn get(&self, name: &str) -> ObjectResult<Vec<u8>> {
        check_object_name(name)?;
        let (s3, path) = (self.s3.clone(), self.path(name));
        self.run(async move {
            let r = s3.get(&path).await.map_err(map_err)?;
            let b = r.bytes().await.map_err(map_err)?;
            Ok(b.to_vec())
        })
    }

    fn delete(&self, name: &str) -> ObjectResult<()> {
        check_object_name(name)?;
        let (s3, path) = (self.s3.clone(), self.path(name));
        self.run(async move {
            match s3.delete(&path).await {
                Ok(()) => Ok(()),
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(map_err(e)),
            }
        })
    }

    fn list(&self, prefix: &str) -> ObjectResult<Vec<ObjectInfo>> {
        use futures::TryStreamExt;
        let s3 = self.s3.clone();
        // List under the directory part of `prefix`, then filter by the whole prefix.
        let full = if self.prefix.is_empty() {
            prefix.to_string()
        } else {
            format!("{}/{prefix}", self.prefix)
        };
        let dir = full.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        self.run(async move {
            let dir_path = (!dir.is_empty()).then(|| ObjectPath::from(dir));
            let metas: Vec<object_store::ObjectMeta> =
                s3.list(dir_path.as_ref()).try_collect().await.map_err(map_err)?;
            Ok(metas
                .into_iter()
                .filter_map(|m| {
                    let name = m.location.as_ref().strip_prefix(&strip)?.to_string();
                    m.location.as_ref().starts_with(&full).then(|| ObjectInfo {
                        name,
                        size: m.size,
                        last_modified: Some(SystemTime::from(m.last_modified)),
                    })
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        assert_eq!(parse_url("s3://b").unwrap(), ("b".into(), "".into()));
        assert_eq!(parse_url("s3://b/p/q/").unwrap(), ("b".into(), "p/q".into()));
        for bad in ["b/p", "s3://", "s3:///p", "http://b"] {
            assert_eq!(parse_url(bad).unwrap_err().kind, ObjectErrorKind::Permanent, "{bad}");
        }
    }
}
