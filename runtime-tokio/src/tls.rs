//! TLS with rustls: configs built with an explicit provider (never the process
//! default, which panics when two providers are compiled in), webpki roots by
//! default, custom roots and client certificates, ALPN from the Address's
//! protocols; the verified certificate's names and key digest go to the core for
//! coalescing and pins. Verification cannot be turned off.

use std::io;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use switchyard_core::{ConnectError, Host, Protocol, TlsFacts, TlsFailure};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The crypto provider: ring by default, aws-lc-rs with the `aws-lc-rs` feature.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[cfg(feature = "aws-lc-rs")]
    {
        Arc::new(rustls::crypto::aws_lc_rs::default_provider())
    }
    #[cfg(not(feature = "aws-lc-rs"))]
    {
        Arc::new(rustls::crypto::ring::default_provider())
    }
}

/// What the builder collected about TLS.
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    pub(crate) built_in_roots: bool,
    pub(crate) extra_roots: Vec<CertificateDer<'static>>,
    pub(crate) client_auth: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings { built_in_roots: true, extra_roots: Vec::new(), client_auth: None }
    }
}

/// Builds the rustls config for an ALPN list.
pub(crate) fn client_config(
    settings: &TlsSettings,
    protocols: &[Protocol],
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    if settings.built_in_roots {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    for cert in &settings.extra_roots {
        roots.add(cert.clone()).map_err(|e| format!("bad root certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no trusted root certificates (built-in roots disabled and none added)".into());
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS provider: {e}"))?
        .with_root_certificates(roots);
    let mut config = match &settings.client_auth {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("bad client certificate: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = protocols.iter().filter_map(|p| p.alpn_id()).map(<[u8]>::to_vec).collect();
    Ok(Arc::new(config))
}

/// Runs the TLS handshake on `tcp` for `host`: the negotiated protocol and the
/// verified certificate's facts, or a typed failure.
pub(crate) async fn handshake(
    config: Arc<ClientConfig>,
    host: &Host,
    tcp: crate::driver::Io,
) -> Result<(TlsStream<crate::driver::Io>, Option<Protocol>, TlsFacts), ConnectError> {
    let name: ServerName<'static> = match host {
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        Host::Domain(d) => ServerName::try_from(d.clone())
            .map_err(|e| ConnectError::Tls { kind: TlsFailure::Protocol, message: e.to_string() })?,
    };
    let stream =
        tokio_rustls::TlsConnector::from(config).connect(name, tcp).await.map_err(|e| tls_error(&e))?;
    let session = stream.get_ref().1;
    let alpn = match session.alpn_protocol() {
        Some(b"h2") => Some(Protocol::Http2),
        Some(b"http/1.1") => Some(Protocol::Http1),
        _ => None,
    };
    let facts = session.peer_certificates().and_then(|chain| chain.first()).map(facts).unwrap_or_default();
    Ok((stream, alpn, facts))
}

fn facts(leaf: &CertificateDer<'_>) -> TlsFacts {
    let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else { return TlsFacts::default() };
    let dns_names = cert.valid_dns_names().map(str::to_owned).collect();
    let spki = cert.subject_public_key_info();
    let digest = ring::digest::digest(&ring::digest::SHA256, spki.as_ref());
    let mut sha = [0u8; 32];
    sha.copy_from_slice(digest.as_ref());
    TlsFacts { dns_names, ip_addresses: Vec::new(), spki_sha256: vec![sha] }
}

/// Certificate and hostname failures are distinct: neither is retried.
fn tls_error(e: &io::Error) -> ConnectError {
    use rustls::CertificateError as C;
    let message = e.to_string();
    let kind = match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. })) => {
            TlsFailure::Hostname
        }
        Some(rustls::Error::InvalidCertificate(_)) => TlsFailure::Certificate,
        Some(_) => TlsFailure::Protocol,
        None => return ConnectError::from_io(e),
    };
    ConnectError::Tls { kind, message }
}

/// A plain TCP stream as the handshake's input.
pub(crate) fn boxed(tcp: TcpStream) -> crate::driver::Io {
    Box::new(tcp)
}
