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

/// The crypto provider every config is built with: ring by default, aws-lc-rs with the `aws-lc-rs` feature.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
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
pub struct TlsSettings {
    /// Trust the webpki roots.
    pub built_in_roots: bool,
    /// Roots trusted in addition.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// A client certificate chain and its key.
    pub client_auth: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
    /// A rustls config prepared by the caller (its roots, verifier, client
    /// identity, versions); ALPN is still set per connection.
    pub prepared: Option<Arc<ClientConfig>>,
    /// Accept any server certificate (development only): no verification.
    pub accept_invalid_certificates: bool,
    /// The prepared config's verifier checks host names as switchyard's own
    /// does: its connections may be coalescing targets.
    pub prepared_coalesces: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            built_in_roots: true,
            extra_roots: Vec::new(),
            client_auth: None,
            prepared: None,
            accept_invalid_certificates: false,
            prepared_coalesces: false,
        }
    }
}

/// The verifier behind `danger_accept_invalid_certificates`: any certificate
/// chain is accepted, for any name; the handshake's signatures are still
/// checked (so the peer holds the key of the certificate it sent).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Builds the rustls config for an ALPN list (the Address's protocols, in order).
///
/// # Errors
/// No roots at all, a bad root or a bad client certificate.
pub fn client_config(settings: &TlsSettings, protocols: &[Protocol]) -> Result<Arc<ClientConfig>, String> {
    let mut config = base_config(settings)?;
    config.alpn_protocols = alpn(protocols);
    Ok(Arc::new(config))
}

fn alpn(protocols: &[Protocol]) -> Vec<Vec<u8>> {
    protocols.iter().filter_map(|p| p.alpn_id()).map(<[u8]>::to_vec).collect()
}

fn base_config(settings: &TlsSettings) -> Result<ClientConfig, String> {
    let mut config = match &settings.prepared {
        Some(prepared) => ClientConfig::clone(prepared),
        None => own_config(settings)?,
    };
    if settings.accept_invalid_certificates {
        let provider = Arc::clone(config.crypto_provider());
        config.dangerous().set_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)));
    }
    Ok(config)
}

fn own_config(settings: &TlsSettings) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    if settings.built_in_roots {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    for cert in &settings.extra_roots {
        roots.add(cert.clone()).map_err(|e| {
            let why = match &e {
                rustls::Error::InvalidCertificate(_) => describe(&e),
                other => other.to_string(),
            };
            format!(
                "root certificate: not a usable certificate ({})",
                why.trim_start_matches("the certificate ")
            )
        })?;
    }
    if roots.is_empty() {
        return Err("no trusted root certificates (built-in roots disabled and none added)".into());
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS provider: {e}"))?
        .with_root_certificates(roots);
    Ok(match &settings.client_auth {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("client identity: not usable ({})", describe(&e)))?,
        None => builder.with_no_client_auth(),
    })
}

/// The rustls configs a client uses, one per ALPN list its Addresses can have
/// (`h2, http/1.1`; `http/1.1`; `h2`), built once when the client is built, so
/// no config (and no root store) is ever built under the pool's lock.
///
/// ```
/// # use switchyard_common::tls::{TlsConfigs, TlsSettings};
/// # use switchyard_core::Protocol;
/// let configs = TlsConfigs::build(&TlsSettings::default())?;
/// let both = configs.get(&[Protocol::Http2, Protocol::Http1]);
/// assert_eq!(both.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone)]
pub struct TlsConfigs {
    settings: TlsSettings,
    /// Certificates are not verified (`danger_accept_invalid_certificates`).
    pub unverified: bool,
    /// Who verifies the certificates, as the handshake facts report it.
    pub verification: Verification,
    configs: Vec<(Vec<Protocol>, Arc<ClientConfig>)>,
}

/// Who verified a connection's certificate, for its [`TlsFacts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// Nobody (`danger_accept_invalid_certificates`).
    pub unverified: bool,
    /// A verifier the caller supplied (`tls_config`), not vouched for as
    /// checking names: its connections are not coalescing targets.
    pub caller_verifier: bool,
}

impl std::fmt::Debug for TlsConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lists: Vec<&Vec<Protocol>> = self.configs.iter().map(|(p, _)| p).collect();
        f.debug_struct("TlsConfigs").field("alpn_lists", &lists).finish_non_exhaustive()
    }
}

impl TlsConfigs {
    /// Builds every config (the root store once).
    ///
    /// # Errors
    /// No roots at all, a bad root or a bad client certificate.
    pub fn build(settings: &TlsSettings) -> Result<TlsConfigs, String> {
        let base = base_config(settings)?;
        let lists = [
            vec![Protocol::Http2, Protocol::Http1],
            vec![Protocol::Http1],
            vec![Protocol::Http2],
            vec![Protocol::Http3],
        ];
        let configs = lists
            .into_iter()
            .map(|list| {
                let mut c = base.clone();
                c.alpn_protocols = alpn(&list);
                (list, Arc::new(c))
            })
            .collect();
        Ok(TlsConfigs {
            settings: settings.clone(),
            unverified: settings.accept_invalid_certificates,
            verification: Verification {
                unverified: settings.accept_invalid_certificates,
                caller_verifier: settings.prepared.is_some() && !settings.prepared_coalesces,
            },
            configs,
        })
    }

    /// The config for an Address's protocols. A list the client never makes
    /// (none today) is built on the spot, from settings already validated.
    #[must_use]
    pub fn get(&self, protocols: &[Protocol]) -> Arc<ClientConfig> {
        if let Some((_, c)) = self.configs.iter().find(|(p, _)| p == protocols) {
            return Arc::clone(c);
        }
        client_config(&self.settings, protocols).unwrap_or_else(|_| Arc::clone(&self.configs[0].1))
    }
}

/// The name the handshake verifies: the Address's host.
pub fn server_name(host: &Host) -> Result<ServerName<'static>, ConnectError> {
    match host {
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        Host::Domain(d) => ServerName::try_from(d.clone())
            .map_err(|e| ConnectError::Tls { kind: TlsFailure::Protocol, message: e.to_string() }),
    }
}

/// What a finished handshake tells the core: the ALPN protocol and the verified
/// leaf certificate's names and key digest, and who verified it
/// (`verification`: nobody, or a verifier the caller supplied; the facts say
/// so). `peer` is the address dialled on
/// a direct route: when the certificate covers that IP (an IP-address SAN),
/// the facts say so, so an `https://<that IP>/` call may coalesce onto the
/// connection (the only IP a coalescing candidate could match it on).
#[must_use]
pub fn negotiated(
    session: &rustls::ClientConnection,
    verification: Verification,
    peer: Option<std::net::IpAddr>,
) -> (Option<Protocol>, TlsFacts) {
    let alpn = match session.alpn_protocol() {
        Some(b"h2") => Some(Protocol::Http2),
        Some(b"http/1.1") => Some(Protocol::Http1),
        _ => None,
    };
    let leaf = session.peer_certificates().and_then(|chain| chain.first());
    (alpn, leaf_facts(leaf, verification, peer))
}

/// [`negotiated`]'s facts from a verified chain's leaf, however the handshake
/// ran (TLS over TCP, or inside QUIC for HTTP/3).
#[must_use]
pub fn leaf_facts(
    leaf: Option<&CertificateDer<'_>>,
    verification: Verification,
    peer: Option<std::net::IpAddr>,
) -> TlsFacts {
    let mut facts = leaf.map(facts).unwrap_or_default();
    facts.unverified = verification.unverified;
    facts.caller_verifier = verification.caller_verifier;
    if let (Some(leaf), Some(ip)) = (leaf, peer) {
        let covered = webpki::EndEntityCert::try_from(leaf).is_ok_and(|cert| {
            let name = ServerName::IpAddress(ip.into());
            cert.verify_is_valid_for_subject_name(&name).is_ok()
        });
        if covered {
            facts.ip_addresses.push(ip);
        }
    }
    facts
}

fn facts(leaf: &CertificateDer<'_>) -> TlsFacts {
    let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else { return TlsFacts::default() };
    let dns_names = cert.valid_dns_names().map(str::to_owned).collect();
    let spki = cert.subject_public_key_info();
    let digest = ring::digest::digest(&ring::digest::SHA256, spki.as_ref());
    let mut sha = [0u8; 32];
    sha.copy_from_slice(digest.as_ref());
    TlsFacts { dns_names, spki_sha256: vec![sha], ..TlsFacts::default() }
}

/// A name as rustls shows a presented certificate name (`DnsName("a.test")`,
/// `IpAddress(…)`, or bare): the name alone.
fn bare_name(presented: &str) -> &str {
    let inner = presented.find('(').map_or(presented, |i| &presented[i + 1..]);
    inner.trim_end_matches(')').trim_matches('"')
}

/// A rustls error in words (its own `Display` shows Rust names such as
/// `UnknownIssuer` or `DnsName("…")`).
#[must_use]
pub fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => "the certificate was not issued by a trusted authority".into(),
            C::BadEncoding => "the certificate is malformed".into(),
            C::Expired | C::ExpiredContext { .. } => "the certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "the certificate is not valid yet".into(),
            C::Revoked => "the certificate has been revoked".into(),
            C::BadSignature => "the certificate's signature is invalid".into(),
            C::NotValidForName => "the certificate does not cover the host name".into(),
            C::NotValidForNameContext { expected, presented } => {
                let names: Vec<&str> = presented.iter().map(|p| bare_name(p)).collect();
                let expected = format!("{expected:?}");
                format!(
                    "the certificate does not cover {}; it covers {}",
                    bare_name(&expected),
                    if names.is_empty() { "no name".to_owned() } else { names.join(", ") }
                )
            }
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                "the certificate is not meant for a TLS server".into()
            }
            C::Other(o) => match (*o.0).downcast_ref::<webpki::Error>() {
                Some(webpki::Error::CaUsedAsEndEntity) => "the certificate is a CA certificate \
                    (basicConstraints CA:TRUE) presented as the server's own; a server certificate, \
                    self-signed ones included, needs CA:FALSE"
                    .into(),
                Some(webpki::Error::EndEntityUsedAsCa) => {
                    "the chain uses a server certificate (CA:FALSE) as an issuer".into()
                }
                Some(webpki::Error::UnsupportedCertVersion) => {
                    "the certificate is not an X.509 version 3 certificate".into()
                }
                Some(webpki::Error::PathLenConstraintViolated) => {
                    "the chain is longer than an issuer's path length allows".into()
                }
                _ => format!("the certificate was rejected: {}", words(&o.to_string())),
            },
            other => format!("the certificate was rejected ({})", words(&format!("{other:?}"))),
        },
        rustls::Error::AlertReceived(alert) => {
            format!("the server sent a fatal alert: {}", words(&format!("{alert:?}")))
        }
        rustls::Error::NoCertificatesPresented => "the server sent no certificate".into(),
        rustls::Error::PeerIncompatible(why) => {
            format!("the server is incompatible: {}", words(&format!("{why:?}")))
        }
        rustls::Error::PeerMisbehaved(why) => {
            format!("the server broke the TLS protocol: {}", words(&format!("{why:?}")))
        }
        other => words(&other.to_string()),
    }
}

/// `UnknownIssuer` → `unknown issuer`: a Rust name spelled as words, any
/// `{ … }` or `( … )` details dropped.
fn words(name: &str) -> String {
    let name = name.split(['{', '(']).next().unwrap_or(name).trim();
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with(' ') {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A failed handshake as a typed error. Certificate and hostname failures are
/// distinct (neither is retried); an I/O error that is not from rustls stays an
/// I/O error.
#[must_use]
pub fn tls_error(e: &io::Error) -> ConnectError {
    use rustls::CertificateError as C;
    let rustls_error = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let message = rustls_error.map_or_else(|| e.to_string(), describe);
    let kind = match rustls_error {
        Some(rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. })) => {
            TlsFailure::Hostname
        }
        Some(rustls::Error::InvalidCertificate(_)) => TlsFailure::Certificate,
        Some(_) => TlsFailure::Protocol,
        None => return ConnectError::from_io(e),
    };
    ConnectError::Tls { kind, message }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rustls_errors_are_told_in_words() {
        use rustls::CertificateError as C;
        let e = super::describe(&rustls::Error::InvalidCertificate(C::UnknownIssuer));
        assert_eq!(e, "the certificate was not issued by a trusted authority");
        let e = super::describe(&rustls::Error::InvalidCertificate(C::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("a.test").unwrap().to_owned(),
            presented: vec!["DnsName(\"b.test\")".into(), "c.test".into()],
        }));
        assert_eq!(e, "the certificate does not cover a.test; it covers b.test, c.test");
        // webpki's own reasons arrive wrapped in `Other`: still in words.
        let other = |e: webpki::Error| {
            super::describe(&rustls::Error::InvalidCertificate(C::Other(rustls::OtherError(
                std::sync::Arc::new(e),
            ))))
        };
        let e = other(webpki::Error::CaUsedAsEndEntity);
        assert!(e.starts_with("the certificate is a CA certificate"), "{e}");
        assert!(e.contains("CA:FALSE"), "{e}");
        let e = other(webpki::Error::MaximumPathDepthExceeded);
        assert_eq!(e, "the certificate was rejected: maximum path depth exceeded");
        let e = super::describe(&rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure));
        assert_eq!(e, "the server sent a fatal alert: handshake failure");
    }
}
