//! The `redirect` feature on tokio and smol: off unless a client asks, same-origin
//! hops on the pooled connection, the limit, credentials dropped on a hop to
//! another origin, 303 turning a POST into a GET and 307 resending the body.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use switchyard_tests::server::{ServerOptions, TestServer};

/// The same checks for each adapter (their clients share an API, not a trait).
macro_rules! redirect_checks {
    ($adapter:ident, $block_on:expr) => {{
        let a = TestServer::start(ServerOptions::default());
        let b = TestServer::start(ServerOptions::default());
        let base = format!("http://127.0.0.1:{}", a.port());
        // Another origin: same address, another name and port.
        let other = format!("http://localhost:{}", b.port());
        let name = stringify!($adapter);
        $block_on(async {
            // The feature is on, but a client that did not ask gets the 302.
            let plain = $adapter::Client::builder().no_proxy().build().unwrap();
            let r = plain.get(format!("{base}/redirect/2")).send().await.unwrap();
            assert_eq!(r.status(), 302, "{name}: not followed by default");
            drop(r);

            let client = $adapter::Client::builder()
                .no_proxy()
                .redirect($adapter::redirect::Policy::limited(3))
                .build()
                .unwrap();
            let r = client.get(format!("{base}/redirect/2")).send().await.unwrap();
            assert_eq!((r.status().as_u16(), r.text().await.unwrap().as_str()), (200, "hello"), "{name}");
            let stats = client.stats();
            // Four requests (/redirect/2, /1, /0, /hello) on one connection.
            assert_eq!(
                (stats.created, stats.reused),
                (1, 3),
                "{name}: same-origin hops reuse the connection"
            );
            let r = client.get(format!("{base}/redirect/1")).send().await.unwrap();
            assert_eq!(r.url().to_string(), format!("{base}/hello"), "{name}: the final URL");
            drop(r);
            // Past the limit: an error naming the limit, the last URL called
            // and where the next hop went; never the 3xx as if it were the answer.
            let e = client.get(format!("{base}/redirect/5")).send().await.unwrap_err();
            assert!(e.is_redirect(), "{name}: {e:?}");
            assert!(matches!(e.kind(), $adapter::ErrorKind::Redirect(_)), "{name}: {e:?}");
            let shown = e.to_string();
            assert!(shown.contains("more than 3 redirects"), "{name}: {shown}");
            assert!(shown.contains(&format!("{base}/redirect/2")), "{name}: the last URL called: {shown}");
            assert!(shown.contains("/redirect/1"), "{name}: where it would have gone: {shown}");
            assert!(e.may_have_been_sent(), "{name}: the hops were sent");
            let one = $adapter::Client::builder()
                .no_proxy()
                .redirect($adapter::redirect::Policy::limited(1))
                .build()
                .unwrap();
            // `/redirect/N` is N + 1 hops.
            let e = one.get(format!("{base}/redirect/1")).send().await.unwrap_err();
            assert!(e.to_string().contains("more than 1 redirect ("), "{name}: {e}");
            assert_eq!(one.get(format!("{base}/redirect/0")).send().await.unwrap().status(), 200, "{name}");
            assert_eq!(client.stats().totals.in_use, 0, "{name}: the refused hop's connection went back");

            // Credentials go along on a same-origin hop, not to another origin.
            let same = format!("{base}/goto/302?{base}/headers");
            let seen = client.get(same).bearer_auth("t0ken").send().await.unwrap().text().await.unwrap();
            assert!(seen.contains("authorization: Bearer t0ken"), "{name}: {seen}");
            let cross = format!("{base}/goto/302?{other}/headers");
            let seen = client
                .get(cross)
                .bearer_auth("t0ken")
                .header("cookie", "id=1")
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(seen.contains("host: localhost:"), "{name}: reached the other origin: {seen}");
            assert!(!seen.contains("authorization") && !seen.contains("cookie"), "{name}: {seen}");

            // 303 turns a POST into a GET without its body; 307 resends it.
            let r = client.post(format!("{base}/goto/303?/echo")).body("payload").send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "", "{name}: 303 → GET, no body");
            let r = client.post(format!("{base}/goto/307?/echo")).body("payload").send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "payload", "{name}: 307 keeps the method and the body");

            // `send` of an http::Request follows too.
            let request = http::Request::get(format!("{base}/redirect/1")).body(()).unwrap();
            assert_eq!(client.send(request).await.unwrap().text().await.unwrap(), "hello", "{name}");
            assert_eq!(client.stats().totals.in_use, 0, "{name}: every hop's connection went back");

            // Decompression: off by default, on when asked; with redirects too.
            let r = plain.get(format!("{base}/gzip")).send().await.unwrap();
            assert_eq!(r.headers()["content-encoding"], "gzip", "{name}");
            assert_eq!(&r.bytes().await.unwrap()[..2], &[0x1f, 0x8b], "{name}: raw gzip by default");
            let decoding = $adapter::Client::builder()
                .no_proxy()
                .gzip(true)
                .brotli(true)
                .redirect($adapter::redirect::Policy::default())
                .build()
                .unwrap();
            let r = decoding.get(format!("{base}/goto/302?/gzip")).send().await.unwrap();
            assert!(r.headers().get("content-encoding").is_none(), "{name}: {:?}", r.headers());
            assert!(r.call_id().is_some(), "{name}: the call's id survives the layers");
            assert_eq!(r.text().await.unwrap(), "hello, gzip", "{name}");
            let seen = decoding.get(format!("{base}/headers")).send().await.unwrap().text().await.unwrap();
            assert!(seen.contains("accept-encoding: gzip,br"), "{name}: {seen}");
            let e = decoding.get(format!("{base}/bad-gzip")).send().await.unwrap().bytes().await.unwrap_err();
            assert!(matches!(e.kind(), $adapter::ErrorKind::Decode(_)), "{name}: {e:?}");
            assert!(e.to_string().contains("/bad-gzip"), "{name}: the error names the URL: {e}");
            assert_eq!(
                decoding.stats().totals.in_use,
                0,
                "{name}: decoded bodies released their connections"
            );
        })
    }};
}

#[test]
fn tokio_follows_redirects_when_asked() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    redirect_checks!(switchyard_tokio, |f| rt.block_on(f));
}

#[test]
fn smol_follows_redirects_when_asked() {
    redirect_checks!(switchyard_smol, smol::block_on);
}
