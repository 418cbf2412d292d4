//! Certificates made at test time: a test CA and leaves signed by it, plus a
//! self-signed leaf nobody trusts.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A certificate chain (leaf first) and its private key, in DER.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// DER certificates, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// PKCS#8 DER private key.
    pub key: Vec<u8>,
    /// The chain in PEM (leaf first), for servers configured by file.
    pub chain_pem: String,
    /// The private key in PEM.
    pub key_pem: String,
}

/// A test certificate authority.
pub struct TestCa {
    /// The CA certificate (DER), to trust in clients.
    pub cert: Vec<u8>,
    /// The CA certificate in PEM.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A fresh CA.
    #[must_use]
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "switchyard test CA");
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            cert: cert.der().to_vec(),
            cert_pem: pem("CERTIFICATE", cert.der()),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for these names (DNS names or IP literals), signed by this CA.
    #[must_use]
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let params = CertificateParams::new(names).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf certificate");
        Leaf {
            chain: vec![cert.der().to_vec(), self.cert.clone()],
            key: key.serialize_der(),
            chain_pem: format!("{}{}", pem("CERTIFICATE", cert.der()), self.cert_pem),
            key_pem: pem("PRIVATE KEY", &key.serialize_der()),
        }
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

/// A self-signed leaf no client trusts.
#[must_use]
pub fn untrusted_leaf(names: &[&str]) -> Leaf {
    let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let params = CertificateParams::new(names).expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("certificate");
    Leaf {
        chain: vec![cert.der().to_vec()],
        key: key.serialize_der(),
        chain_pem: pem("CERTIFICATE", cert.der()),
        key_pem: pem("PRIVATE KEY", &key.serialize_der()),
    }
}

/// DER as PEM (RFC 7468): base64 in lines of 64, between labelled lines.
#[must_use]
pub fn pem(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = Vec::with_capacity(der.len().div_ceil(3) * 4);
    for chunk in der.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] } else { b'=' };
            b64.push(c);
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out + &format!("-----END {label}-----\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn pem_is_base64_in_lines() {
        assert_eq!(super::pem("X", b"Man"), "-----BEGIN X-----\nTWFu\n-----END X-----\n");
        assert_eq!(super::pem("X", b"Ma"), "-----BEGIN X-----\nTWE=\n-----END X-----\n");
        assert_eq!(super::pem("X", b"M"), "-----BEGIN X-----\nTQ==\n-----END X-----\n");
        let long = super::pem("X", &[0u8; 60]);
        assert_eq!(long.lines().nth(1).map(str::len), Some(64));
    }
}
