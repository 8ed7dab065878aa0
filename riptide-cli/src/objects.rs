//! The object-tier flags every command that opens a database shares ([`ObjectArgs`]), and the
//! object store they name.
//!
//! Invariants: a bad flag is a usage error found before anything is opened; S3 credentials
//! come from the environment (`AWS_ACCESS_KEY_ID`, ...), never from a flag or the database
//! directory; a latency proxy, when asked for, lives as long as the process.

use clap::Args;
use riptide::fs::PosixFs;
use riptide::tier::{DirObjectStore, ObjectStore, Tier};
use riptide::Options;
use riptide_s3::fault_proxy::FaultProxy;
use riptide_s3::{S3Options, S3Store};
use std::net::ToSocketAddrs;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Object-tier flags.
#[derive(Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct ObjectArgs {
    /// Object store of the object tier: s3://BUCKET[/PREFIX] (credentials from the environment)
    /// or dir:PATH (a directory)
    #[arg(long, value_name = "URL")]
    pub object_store: Option<String>,
    /// Endpoint of an S3-compatible service, e.g. http://127.0.0.1:9000
    #[arg(long, value_name = "URL")]
    pub object_endpoint: Option<String>,
    /// Where new L2 extents live: local or object (default: object when --object_store is given)
    #[arg(long, value_name = "TIER")]
    pub l2_tier: Option<String>,
    /// Bytes of local disk caching whole object-tier extents (0 = none)
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub extent_cache_size: u64,
    /// Seconds an object no metadata names stays before it is deleted
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub object_delete_grace: u64,
    /// Milliseconds added to every object-store request through a loopback proxy (benchmarks
    /// of a remote store against a local S3 server; needs --object_endpoint=http://...)
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub object_latency_ms: u64,
}

/// Proxies started for `--object_latency_ms`, kept for the life of the process.
static PROXIES: Mutex<Vec<FaultProxy>> = Mutex::new(Vec::new());

impl ObjectArgs {
    /// The object store the flags name, if any.
    pub fn store(&self) -> Result<Option<Arc<dyn ObjectStore>>, String> {
        let Some(url) = &self.object_store else {
            if self.object_endpoint.is_some() || self.object_latency_ms > 0 {
                return Err("--object_endpoint and --object_latency_ms need --object_store".into());
            }
            return Ok(None);
        };
        open_store(
            url,
            self.object_endpoint.as_deref(),
            self.object_latency_ms,
            &OBJECT_FLAGS,
        )
        .map(Some)
    }

    /// Sets the object-tier fields of `opts` from the flags.
    pub fn apply(&self, opts: &mut Options) -> Result<(), String> {
        let store = self.store()?;
        let tier = match self.l2_tier.as_deref() {
            None if store.is_some() => Tier::Object,
            None => Tier::Local,
            Some(t) => Tier::parse(t).ok_or_else(|| format!("--l2_tier={t}: expected local or object"))?,
        };
        opts.object_store = store;
        opts.l2_tier = tier;
        opts.extent_cache_size = self.extent_cache_size;
        opts.object_delete_grace = Duration::from_secs(self.object_delete_grace);
        Ok(())
    }

    /// The flags, for a child process (`riptide stress` crash rounds).
    pub fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(s) = &self.object_store {
            out.push(format!("--object_store={s}"));
        }
        if let Some(e) = &self.object_endpoint {
            out.push(format!("--object_endpoint={e}"));
        }
        if let Some(t) = &self.l2_tier {
            out.push(format!("--l2_tier={t}"));
        }
        out.push(format!("--extent_cache_size={}", self.extent_cache_size));
        out.push(format!("--object_delete_grace={}", self.object_delete_grace));
        if self.object_latency_ms > 0 {
            out.push(format!("--object_latency_ms={}", self.object_latency_ms));
        }
        out
    }
}

/// The names of the flags that name a store, for messages.
pub struct StoreFlags {
    /// The store's URL.
    pub store: &'static str,
    /// The S3 endpoint.
    pub endpoint: &'static str,
    /// The added latency.
    pub latency: &'static str,
}

/// The object tier's flags.
pub const OBJECT_FLAGS: StoreFlags = StoreFlags {
    store: "--object_store",
    endpoint: "--object_endpoint",
    latency: "--object_latency_ms",
};

/// The store `url` names: `s3://BUCKET[/PREFIX]` at `endpoint` (credentials from the
/// environment), with `latency_ms` added to each request through a loopback proxy, or
/// `dir:PATH`. Messages name the flags `flags`.
pub fn open_store(
    url: &str,
    endpoint: Option<&str>,
    latency_ms: u64,
    flags: &StoreFlags,
) -> Result<Arc<dyn ObjectStore>, String> {
    let StoreFlags {
        store: store_flag,
        endpoint: endpoint_flag,
        latency: latency_flag,
    } = flags;
    if let Some(path) = url.strip_prefix("dir:") {
        if latency_ms > 0 {
            return Err(format!("{latency_flag} needs an s3:// store"));
        }
        return Ok(Arc::new(DirObjectStore::new(Arc::new(PosixFs), path)));
    }
    if !url.starts_with("s3://") {
        return Err(format!("{store_flag}={url}: expected s3://BUCKET[/PREFIX] or dir:PATH"));
    }
    let mut endpoint = endpoint.map(str::to_string);
    if latency_ms > 0 {
        let Some(up) = endpoint.as_deref().and_then(|e| e.strip_prefix("http://")) else {
            return Err(format!("{latency_flag} needs {endpoint_flag}=http://HOST:PORT"));
        };
        let addr = up
            .trim_end_matches('/')
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("{endpoint_flag}: cannot resolve {up}"))?;
        let proxy = FaultProxy::start(addr).map_err(|e| format!("starting the latency proxy: {e}"))?;
        proxy.set_latency(Duration::from_millis(latency_ms));
        endpoint = Some(proxy.endpoint());
        PROXIES.lock().map_err(|_| "proxy list poisoned")?.push(proxy);
    }
    let store = S3Store::new(S3Options {
        endpoint,
        ..S3Options::new(url.to_string())
    })
    .map_err(|e| format!("{store_flag}={url}: {e}"))?;
    Ok(Arc::new(store))
}
