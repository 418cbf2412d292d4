//! Response decoding throughput: a typical 200 with 10 headers and a 1 KiB body,
//! and a 1 MiB chunked body (16 KiB chunks). Body frames are views of the read
//! buffer (`Bytes`), so the decoder copies no body byte; the input buffer is built
//! outside the timed region, as a socket read would fill it.
//!
//! Run: `cargo bench -p switchyard-core --bench http1`
#![allow(clippy::unwrap_used, missing_docs)]

use bytes::BytesMut;
use divan::counter::BytesCount;
use switchyard_core::http1::{Frame, Limits, ResponseDecoder};

fn main() {
    divan::main();
}

#[path = "support/fixtures.rs"]
#[allow(dead_code, unreachable_pub)] // each bench uses half of it
mod fixtures;

fn typical() -> Vec<u8> {
    fixtures::typical_response()
}

fn chunked_1mib() -> Vec<u8> {
    let mut r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..64 {
        r.extend_from_slice(b"4000\r\n");
        r.extend(std::iter::repeat_n(b'y', 16 * 1024));
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(b"0\r\n\r\n");
    r
}

fn decode_all(mut buf: BytesMut) -> usize {
    let mut d = ResponseDecoder::new(&http::Method::GET, Limits::default());
    let mut body = 0;
    loop {
        match d.decode(&mut buf, false).unwrap() {
            Some(Frame::Data(b)) => body += b.len(),
            Some(Frame::End) => return body,
            Some(_) => {}
            None => panic!("incomplete"),
        }
    }
}

#[divan::bench(sample_count = 200, sample_size = 200)]
fn typical_200_10_headers_1kib(bencher: divan::Bencher<'_, '_>) {
    let input = typical();
    bencher
        .counter(BytesCount::new(input.len()))
        .with_inputs(|| BytesMut::from(&input[..]))
        .bench_local_values(|buf| assert_eq!(decode_all(buf), 1024));
}

#[divan::bench(sample_count = 100, sample_size = 8)]
fn chunked_1mib_body(bencher: divan::Bencher<'_, '_>) {
    let input = chunked_1mib();
    bencher
        .counter(BytesCount::new(input.len()))
        .with_inputs(|| BytesMut::from(&input[..]))
        .bench_local_values(|buf| assert_eq!(decode_all(buf), 1 << 20));
}
