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
}

/// A test certificate authority.
pub struct TestCa {
    /// The CA certificate (DER), to trust in clients.
    pub cert: Vec<u8>,
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
        TestCa { cert: cert.der().to_vec(), issuer: Issuer::new(params, key) }
    }

    /// A leaf for these names (DNS names or IP literals), signed by this CA.
    #[must_use]
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let params = CertificateParams::new(names).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf certificate");
        Leaf { chain: vec![cert.der().to_vec(), self.cert.clone()], key: key.serialize_der() }
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
    Leaf { chain: vec![cert.der().to_vec()], key: key.serialize_der() }
}
