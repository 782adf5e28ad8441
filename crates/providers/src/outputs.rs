//! Downloading the files an upstream names in its answers: Replicate's output
//! URLs, an OpenAI-compatible server's image `url`s. Such a URL comes from an
//! answer, not from our configuration, so it gets the guard of client media
//! URLs (`unigen_core::fetch`): http(s) only; no connection to a private,
//! loopback, link-local (cloud metadata) or otherwise non-public address;
//! a timeout over the whole download; a size cap enforced while the body
//! streams (a larger announced length is refused before reading any of it).
//!
//! Addresses: a literal IP is checked here; a name is resolved by
//! [`GuardedResolver`], which hands the client only public addresses, and
//! those are the addresses it connects to (no second lookup to rebind).
//! Redirects are followed here, not by the HTTP client, so every hop is
//! checked the same way (at most [`MAX_REDIRECTS`]).
//!
//! The one exception is the upstream's own origin (scheme, host and port of
//! its configured `base_url`): the operator chose that server, and one on a
//! private address (a self-hosted model server, the tests' fake Replicate on
//! 127.0.0.1) serves its outputs from there. Another port or host of the same
//! private network is refused like any other private address.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use unigen_core::fetch::{GuardedResolver, is_public};

use super::http::{Attempt, bearer, connection_failure};

pub const MAX_REDIRECTS: usize = 5;

/// Where an upstream's output files may be fetched from, and with what.
pub struct OutputSource<'a> {
    /// The upstream's configured base URL: its origin is trusted.
    pub base_url: &'a str,
    /// The upstream's key, sent only to URLs under `base_url` reached without
    /// leaving its origin (Replicate's files API); `None` never sends it.
    pub api_key: Option<&'a str>,
    /// For the whole download: every hop and the body.
    pub timeout: Duration,
}

impl OutputSource<'_> {
    /// GETs `url` following at most [`MAX_REDIRECTS`] checked redirects, and
    /// answers the first response that is not a redirect, whatever its
    /// status (the caller classifies failures). Refusals are permanent.
    pub async fn open(&self, url: &str) -> Result<reqwest::Response, Attempt> {
        let deadline = Instant::now() + self.timeout;
        let upstream = reqwest::Url::parse(self.base_url).ok();
        let on_upstream = |url: &reqwest::Url| {
            upstream
                .as_ref()
                .is_some_and(|u| u.origin() == url.origin())
        };
        let mut url = reqwest::Url::parse(url)
            .map_err(|_| Attempt::permanent("the upstream named an invalid output file URL"))?;
        // The key goes only where the upstream itself is, and only while no
        // other server has chosen where we go.
        let mut trusted_chain = true;
        for hop in 0..=MAX_REDIRECTS {
            if !matches!(url.scheme(), "http" | "https") {
                return Err(Attempt::permanent(format!(
                    "the upstream {} an output file that is not an http(s) URL",
                    if hop == 0 { "named" } else { "redirected to" }
                )));
            }
            let own = on_upstream(&url);
            trusted_chain &= own;
            if !own {
                refuse_private_literal(&url, hop)?;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Attempt {
                    error: unigen_core::ProviderError::Transient("the upstream timed out".into()),
                    retry_after: None,
                });
            }
            let client = if own { trusted() } else { guarded() };
            let mut request = client.get(url.clone()).timeout(remaining);
            if let Some(key) = self.api_key
                && trusted_chain
                && self.is_api_url(&url)
            {
                request = bearer(request, key);
            }
            let response = request.send().await.map_err(|err| {
                if !own && format!("{err:?}").contains("no public address") {
                    private_address(url.host_str().unwrap_or_default(), hop)
                } else {
                    connection_failure(err)
                }
            })?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let Some(next) = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|location| url.join(location).ok())
            else {
                // A redirect status without a usable Location: the caller
                // reports the status.
                return Ok(response);
            };
            url = next;
        }
        Err(Attempt::permanent(format!(
            "the output file URL redirected more than {MAX_REDIRECTS} times"
        )))
    }

    fn is_api_url(&self, url: &reqwest::Url) -> bool {
        let base = self.base_url.trim_end_matches('/');
        url.as_str()
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Reads a successful response's body, refusing more than `max_bytes`:
/// before reading when the length is announced, else as soon as the
/// streamed body passes the cap (at most `max_bytes` plus one chunk is held).
pub async fn read_capped(
    mut response: reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, Attempt> {
    let too_large =
        || Attempt::permanent(format!("the output file is larger than {max_bytes} bytes"));
    let announced = response.content_length();
    if announced.is_some_and(|len| len > max_bytes as u64) {
        return Err(too_large());
    }
    let capacity = announced.map_or(0, |len| len as usize).min(max_bytes);
    let mut body = Vec::with_capacity(capacity);
    while let Some(chunk) = response.chunk().await.map_err(connection_failure)? {
        if body.len() + chunk.len() > max_bytes {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A literal non-public address off the upstream's origin is refused before
/// connecting; names are left to the guarded resolver.
fn refuse_private_literal(url: &reqwest::Url, hop: usize) -> Result<(), Attempt> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => {
            return Err(Attempt::permanent(
                "the upstream named an output file URL without a host",
            ));
        }
    };
    if is_public(ip) {
        Ok(())
    } else {
        Err(private_address(&ip.to_string(), hop))
    }
}

fn private_address(host: &str, hop: usize) -> Attempt {
    Attempt::permanent(format!(
        "the upstream {} an output file on a private, loopback or link-local address \
         ({host}), which is not allowed (only its own address may be private)",
        if hop == 0 { "named" } else { "redirected to" }
    ))
}

/// Clients for output files: redirects are followed by [`OutputSource::open`];
/// nothing is pooled (downloads are rare, and a static client's pooled
/// connection must not outlive the runtime that opened it).
fn client(resolver: Option<GuardedResolver>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .no_proxy()
        .user_agent(concat!("unigen/", env!("CARGO_PKG_VERSION")));
    if let Some(resolver) = resolver {
        builder = builder.dns_resolver(Arc::new(resolver));
    }
    builder
        .build()
        .expect("the HTTP client configuration is valid")
}

/// For any origin but the upstream's: public addresses only.
fn guarded() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| client(Some(GuardedResolver::new(false))))
}

/// For the upstream's own origin, wherever it is.
fn trusted() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| client(None))
}

#[cfg(test)]
mod tests {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use unigen_core::ProviderError;

    fn source(base_url: &str) -> OutputSource<'_> {
        OutputSource {
            base_url,
            api_key: Some("r8_key"),
            timeout: Duration::from_secs(5),
        }
    }

    async fn fetch(source: &OutputSource<'_>, url: &str) -> Result<Vec<u8>, ProviderError> {
        let response = source.open(url).await.map_err(|a| a.error)?;
        assert!(response.status().is_success(), "{}", response.status());
        read_capped(response, 100).await.map_err(|a| a.error)
    }

    fn refused(err: &ProviderError) -> bool {
        matches!(err, ProviderError::Permanent(m) if m.contains("private, loopback or link-local"))
    }

    #[tokio::test]
    async fn the_upstreams_own_origin_is_trusted_other_private_ones_are_not() {
        let upstream = MockServer::start().await;
        let internal = MockServer::start().await;
        for server in [&upstream, &internal] {
            Mock::given(method("GET"))
                .respond_with(ResponseTemplate::new(200).set_body_bytes(b"out".to_vec()))
                .mount(server)
                .await;
        }
        let base = format!("{}/v1", upstream.uri());
        let source = source(&base);
        assert_eq!(
            fetch(&source, &format!("{}/delivery/a.png", upstream.uri()))
                .await
                .unwrap(),
            b"out"
        );
        // Another port of the same loopback address, the metadata service,
        // a name for loopback, private ranges, IPv6 forms.
        let port = internal.address().port();
        for url in [
            format!("http://127.0.0.1:{port}/secret"),
            format!("http://localhost:{port}/secret"),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "http://10.0.0.1/x".to_owned(),
            format!("http://[::1]:{port}/x"),
            format!("http://[::ffff:127.0.0.1]:{port}/x"),
            format!("http://2130706433:{port}/x"),
        ] {
            let err = fetch(&source, &url).await.unwrap_err();
            assert!(refused(&err), "{url}: {err:?}");
        }
        assert!(internal.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn every_redirect_hop_is_checked() {
        let upstream = MockServer::start().await;
        let internal = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"secret".to_vec()))
            .mount(&internal)
            .await;
        let target = format!("http://127.0.0.1:{}/secret", internal.address().port());
        Mock::given(method("GET"))
            .and(path("/delivery/away"))
            .respond_with(ResponseTemplate::new(302).insert_header("Location", target.as_str()))
            .mount(&upstream)
            .await;
        Mock::given(method("GET"))
            .and(path("/delivery/file"))
            .respond_with(ResponseTemplate::new(302).insert_header("Location", "/delivery/b.png"))
            .mount(&upstream)
            .await;
        Mock::given(method("GET"))
            .and(path("/delivery/b.png"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"ok".to_vec()))
            .mount(&upstream)
            .await;
        Mock::given(method("GET"))
            .and(path("/delivery/loop"))
            .respond_with(ResponseTemplate::new(302).insert_header("Location", "/delivery/loop"))
            .mount(&upstream)
            .await;
        Mock::given(method("GET"))
            .and(path("/delivery/ftp"))
            .respond_with(
                ResponseTemplate::new(302).insert_header("Location", "ftp://example.com/x"),
            )
            .mount(&upstream)
            .await;
        let base = format!("{}/v1", upstream.uri());
        let source = source(&base);

        let err = fetch(&source, &format!("{}/delivery/away", upstream.uri()))
            .await
            .unwrap_err();
        assert!(refused(&err), "{err:?}");
        assert!(format!("{err:?}").contains("redirected to"), "{err:?}");
        assert!(internal.received_requests().await.unwrap().is_empty());
        // Redirects within the upstream's origin are followed.
        assert_eq!(
            fetch(&source, &format!("{}/delivery/file", upstream.uri()))
                .await
                .unwrap(),
            b"ok"
        );
        let err = fetch(&source, &format!("{}/delivery/loop", upstream.uri()))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Permanent("the output file URL redirected more than 5 times".into())
        );
        let err = fetch(&source, &format!("{}/delivery/ftp", upstream.uri()))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ProviderError::Permanent(m) if m.contains("not an http(s) URL")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn the_key_goes_only_to_the_api_and_never_after_leaving_it() {
        let upstream = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"x".to_vec()))
            .mount(&upstream)
            .await;
        let base = format!("{}/v1", upstream.uri());
        let source = source(&base);
        fetch(&source, &format!("{}/v1/files/f1", upstream.uri()))
            .await
            .unwrap();
        fetch(&source, &format!("{}/delivery/a.png", upstream.uri()))
            .await
            .unwrap();
        let requests = upstream.received_requests().await.unwrap();
        assert_eq!(requests[0].headers["authorization"], "Bearer r8_key");
        assert!(requests[1].headers.get("authorization").is_none());
    }

    #[tokio::test]
    async fn openai_image_urls_get_the_same_guard_and_cap() {
        use serde_json::json;
        let upstream = MockServer::start().await;
        let internal = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"secret".to_vec()))
            .mount(&internal)
            .await;
        Mock::given(method("GET"))
            .and(path("/img/a.png"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"png".to_vec()))
            .mount(&upstream)
            .await;
        let huge = 64 * 1024 * 1024 + 1;
        Mock::given(method("GET"))
            .and(path("/img/huge.png"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![0u8; huge]))
            .mount(&upstream)
            .await;
        let answer = |url: String| {
            ResponseTemplate::new(200).set_body_json(json!({"created": 1, "data": [{"url": url}]}))
        };
        for (name, url) in [
            ("own", format!("{}/img/a.png", upstream.uri())),
            ("internal", format!("{}/secret", internal.uri())),
            ("metadata", "http://169.254.169.254/latest/".to_owned()),
            ("huge", format!("{}/img/huge.png", upstream.uri())),
        ] {
            Mock::given(method("POST"))
                .and(path("/v1/images/generations"))
                .and(wiremock::matchers::body_partial_json(
                    json!({"prompt": name}),
                ))
                .respond_with(answer(url))
                .mount(&upstream)
                .await;
        }
        let client = crate::openai::OpenAiClient::new(&unigen_core::config::UpstreamSettings {
            base_url: format!("{}/v1", upstream.uri()),
            api_key: "sk-up".into(),
            timeout_seconds: 5,
            ..Default::default()
        });
        let generate = |name: &'static str| {
            let client = client.clone();
            async move { client.generate_images(&json!({"prompt": name})).await }
        };
        assert_eq!(generate("own").await.unwrap(), vec![b"png".to_vec()]);
        for name in ["internal", "metadata"] {
            let err = generate(name).await.unwrap_err();
            assert!(refused(&err), "{name}: {err:?}");
        }
        assert!(internal.received_requests().await.unwrap().is_empty());
        assert_eq!(
            generate("huge").await.unwrap_err(),
            ProviderError::Permanent("the output file is larger than 67108864 bytes".into())
        );
    }

    #[tokio::test]
    async fn the_timeout_covers_the_whole_download() {
        let upstream = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_bytes(b"late".to_vec())
                    .set_delay(Duration::from_secs(5)),
            )
            .mount(&upstream)
            .await;
        let base = format!("{}/v1", upstream.uri());
        let source = OutputSource {
            base_url: &base,
            api_key: None,
            timeout: Duration::from_millis(300),
        };
        let started = std::time::Instant::now();
        let err = fetch(&source, &format!("{}/a.png", upstream.uri()))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ProviderError::Transient("the upstream timed out".into())
        );
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
