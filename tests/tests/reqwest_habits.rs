//! A reqwest user's first file, with `reqwest::` swapped for `switchyard_tokio::`
//! and nothing else (no trait to import: the response's methods are its own):
//! it compiles (this is the check) and runs against a
//! loopback server. Each call below is a reqwest habit that must keep working.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use switchyard_tests::proxy::TestProxy;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{Client, NoProxy, Proxy};

#[tokio::test]
async fn a_reqwest_users_first_file_compiles_and_runs() {
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());
    let client = Client::builder()
        .timeout(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(8)
        .danger_accept_invalid_certs(false)
        .user_agent("habits/1.0")
        .no_proxy()
        .build()
        .expect("client");

    // GET, status checked by reference, text without naming a trait.
    let response = client.get(format!("{base}/hello")).send().await.expect("get");
    response.error_for_status_ref().expect("200");
    assert_eq!(response.url().to_string(), format!("{base}/hello"));
    assert_eq!(response.content_length(), Some(5));
    assert_eq!(response.text().await.expect("text"), "hello");

    // error_for_status on a 404.
    let e = client.get(format!("{base}/status/404")).send().await.unwrap().error_for_status().unwrap_err();
    assert_eq!(e.status_code(), Some(http::StatusCode::NOT_FOUND));

    // A request built with http, with a String body: send and execute.
    let request = http::Request::post(format!("{base}/echo")).body(String::from("ping")).unwrap();
    assert_eq!(client.send(request).await.unwrap().text().await.unwrap(), "ping");
    let request = http::Request::post(format!("{base}/echo")).body(b"pong".to_vec()).unwrap();
    assert_eq!(client.execute(request).await.unwrap().bytes().await.unwrap(), &b"pong"[..]);

    // JSON both ways (the `json` feature), a query (the `query` feature).
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Note {
        text: String,
    }
    let note = Note { text: "hi".into() };
    let back: Note =
        client.post(format!("{base}/echo")).json(&note).send().await.unwrap().json().await.unwrap();
    assert_eq!(back, note);
    let r = client.get(format!("{base}/hello")).query(&[("a", "1")]).send().await.unwrap();
    assert_eq!(r.status(), 200);
    drop(r);

    // reqwest's proxy rules: `Proxy::http(url)` for http URLs with credentials in
    // the URL and an exception list, `Proxy::https(url)` that an http request
    // never uses (it points at a closed port), `Proxy::all(..).basic_auth(..)`.
    let hosts = [("origin.test".to_owned(), std::net::IpAddr::from([127, 0, 0, 1]))].into();
    let proxy = TestProxy::http_with_auth(hosts, "ann", "pr0xy-pw");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let with_proxy = Client::builder()
        .proxy(
            Proxy::http(format!("http://ann:pr0xy-pw@{}", proxy.addr))
                .unwrap()
                .no_proxy(NoProxy::from_string("127.0.0.1")),
        )
        .proxy(Proxy::https(format!("http://{closed}")).unwrap())
        .build()
        .unwrap();
    let origin = format!("http://origin.test:{}/hello", server.port());
    assert_eq!(with_proxy.get(&origin).send().await.unwrap().text().await.unwrap(), "hello");
    assert_eq!(proxy.targets(), [format!("forward origin.test:{}", server.port())]);
    assert_eq!(with_proxy.get(format!("{base}/hello")).send().await.unwrap().text().await.unwrap(), "hello");
    assert_eq!(proxy.targets().len(), 1, "no_proxy kept 127.0.0.1 direct");
    let all = Proxy::all(proxy.addr.to_string()).unwrap().basic_auth("ann", "pr0xy-pw");
    let through_all = Client::builder().proxy(all).build().unwrap();
    assert_eq!(through_all.get(&origin).send().await.unwrap().text().await.unwrap(), "hello");
    assert_eq!(proxy.targets().len(), 2);
    let e = Proxy::http("ftp://127.0.0.1:21").unwrap_err();
    assert!(e.to_string().contains("unsupported proxy scheme"), "{e}");
    let e = Client::builder().pool_idle_timeout(None).build().unwrap_err();
    assert!(e.to_string().contains("pool_idle_timeout"), "{e}");
}
