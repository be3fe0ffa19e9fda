//! The web dashboard in a real browser: Debian's headless `chromium`, driven over WebDriver by
//! `chromedriver`, both started here on free loopback ports. What the page shows is checked,
//! not only that it loaded: a topic's count rises after sends, a dead letter replayed by a
//! click (its confirmation accepted) leaves the list and reaches its handler, a handler paused
//! by a click shows its lag growing and catches up when resumed by another, and a read token
//! gets no buttons while its direct `POST` is refused with `403`.
//!
//! Nothing waits a fixed time: each check polls the page for its condition until a deadline
//! (`until`), and fails saying what it saw last.
//!
//! `chromium` and `chromedriver` come from Debian's `chromium` and `chromium-driver`
//! packages; `./test.sh` installs them. Screenshots for the guide: `EB_SCREENSHOTS=docs/images
//! cargo test -p event_base_grpc --test dashboard_browser -- --ignored` (a relative folder is
//! the workspace root's).

// A test's unwrap is its assertion (as in event_base_test); helpers here too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::http::post_json;
use common::{ack, bus_with, Probe, ADMIN, READ, WAIT};
use event_base_core::{Ack, EMessage, EventBus, HandlerSpec};
use event_base_grpc::{GrpcServer, ServeHandle, Tokens};
use fantoccini::{Client, ClientBuilder, Locator};

/// How often a condition on the page is looked at again.
const POLL: Duration = Duration::from_millis(50);

/// A bus served with the read and admin tokens, the HTTP listener on a free port.
struct Dashboard {
    bus: EventBus,
    handle: ServeHandle,
    http: SocketAddr,
}

async fn dashboard(specs: Vec<HandlerSpec>) -> Dashboard {
    let (bus, feed) = bus_with(specs).await;
    let handle = GrpcServer::builder(bus.clone())
        .tokens(Tokens::new().read(READ).admin(ADMIN))
        .watch_feed(feed)
        .http_addr("127.0.0.1:0")
        .serve("127.0.0.1:0")
        .await
        .unwrap();
    let http = handle.http_addr().unwrap();
    Dashboard { bus, handle, http }
}

/// `chromedriver` in a process group of its own (the browser it starts joins it), and a
/// WebDriver session on a headless `chromium`. Dropped, the whole group is killed, so no
/// browser outlives a failed test.
struct Browser {
    driver: Driver,
    client: Client,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const INSTALL: &str = "the dashboard's browser test needs Debian's `chromium` and \
     `chromium-driver` packages: run `./test.sh`, which installs them (or `apt-get install -y \
     chromium chromium-driver`)";

impl Browser {
    async fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let driver = match driver {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("`chromedriver` is not installed; {INSTALL}")
            }
            Err(e) => panic!("could not start chromedriver: {e}"),
        };
        // Owned before connecting: a failed start kills the driver too.
        let driver = Driver(driver);
        let client = connect(port).await;
        client.set_window_size(1280, 900).await.unwrap();
        Browser { driver, client }
    }

    /// Opens the dashboard, with `token` in the address's fragment (never sent to the
    /// server), and waits until it has learnt its scope.
    async fn open(&self, http: SocketAddr, token: &str) {
        self.client
            .goto(&format!("http://{http}/#token={token}"))
            .await
            .unwrap();
        self.until_text("#scope", |t| !t.is_empty()).await;
    }

    /// Polls `check` until it answers `Some`, for at most [`WAIT`]; fails with `what` and
    /// the last thing `check` saw.
    async fn until<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = match check().await {
                Ok(value) => return value,
                Err(seen) => seen,
            };
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for {what}; last saw: {seen}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The text of the first element matching `css`, once `want` holds for it.
    async fn until_text(&self, css: &str, want: impl Fn(&str) -> bool) -> String {
        self.until(&format!("the text of `{css}`"), || async {
            match self.client.find(Locator::Css(css)).await {
                Ok(element) => {
                    let text = element.text().await.map_err(|e| e.to_string())?;
                    if want(&text) {
                        Ok(text)
                    } else {
                        Err(format!("{text:?}"))
                    }
                }
                Err(e) => Err(format!("no such element ({e})")),
            }
        })
        .await
    }

    /// Waits until no element matches `css`.
    async fn until_gone(&self, css: &str) {
        self.until(&format!("`{css}` to be gone"), || async {
            let found = self
                .client
                .find_all(Locator::Css(css))
                .await
                .map_err(|e| e.to_string())?;
            if found.is_empty() {
                Ok(())
            } else {
                Err(format!("{} still there", found.len()))
            }
        })
        .await;
    }

    /// Clicks the first element matching `css`, once there is one.
    async fn click(&self, css: &str) {
        let element = self
            .until(&format!("`{css}` to click"), || async {
                self.client
                    .find(Locator::Css(css))
                    .await
                    .map_err(|e| e.to_string())
            })
            .await;
        element.click().await.unwrap();
    }

    /// How many elements match `css` now.
    async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// Accepts the `confirm()` the page opened, once it is open; returns its question.
    async fn accept_confirmation(&self) -> String {
        let question = self
            .until("a confirmation dialog", || async {
                self.client
                    .get_alert_text()
                    .await
                    .map_err(|e| e.to_string())
            })
            .await;
        self.client.accept_alert().await.unwrap();
        question
    }

    /// Ends the session (the browser quits), then the driver.
    async fn close(self) {
        let _ = self.client.close().await;
        drop(self.driver);
    }
}

/// Kills chromedriver's process group when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        // The group's id is chromedriver's pid (`process_group(0)`); the browser is in it.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// A WebDriver session on chromedriver at `port`, once it listens.
async fn connect(port: u16) -> Client {
    let deadline = Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on port {port} within {WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("chromedriver could not start chromium ({e}); {INSTALL}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_count_rises_on_the_page_after_sends() {
    let probe = Probe::new();
    let d = dashboard(vec![probe.handler("orders", "orders", ack)]).await;
    let browser = Browser::start().await;
    browser.open(d.http, ADMIN).await;
    assert_eq!(browser.until_text("#scope", |_| true).await, "admin");
    let sent = "#topics tr[data-key='orders'] td[data-col='sent']";
    let handled = "#topics tr[data-key='orders'] td[data-col='handled']";
    browser.until_text(sent, |t| t == "0").await;

    for i in 0..3 {
        d.bus.send("orders", format!("order {i}")).await.unwrap();
    }
    probe.wait_for(3).await;
    // The page hears of it through its event stream, without a reload.
    browser.until_text(sent, |t| t == "3").await;
    browser.until_text(handled, |t| t == "3").await;
    browser
        .until_text(
            "#subscriptions tr[data-key='orders/orders'] td[data-col='handled']",
            |t| t == "3",
        )
        .await;
    browser.until_text("#live", |t| t == "live").await;

    browser.close().await;
    d.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_paused_by_a_click_shows_its_lag_and_catches_up_when_resumed() {
    let (mailer, crm) = (Probe::new(), Probe::new());
    let d = dashboard(vec![
        mailer.handler("mailer", "signup", ack),
        crm.handler("crm", "signup", ack),
    ])
    .await;
    let browser = Browser::start().await;
    browser.open(d.http, ADMIN).await;
    let row = "#subscriptions tr[data-key='signup/mailer']";
    let state = format!("{row} td[data-col='state']");
    let lag = format!("{row} td[data-col='lag']");
    browser.until_text(&state, |t| t == "running").await;

    browser
        .click(&format!("{row} button[data-action='pause']"))
        .await;
    let question = browser.accept_confirmation().await;
    assert!(
        question.starts_with("Pause handler mailer of signup?"),
        "{question}"
    );
    browser.until_text(&state, |t| t == "paused").await;
    assert!(d.bus.is_paused("signup", "mailer").unwrap());

    for i in 0..4 {
        d.bus.send("signup", format!("user {i}")).await.unwrap();
    }
    crm.wait_for(4).await;
    // Its lag shows what waits; its sibling goes on.
    browser.until_text(&lag, |t| t == "4").await;
    browser
        .until_text(
            "#subscriptions tr[data-key='signup/crm'] td[data-col='handled']",
            |t| t == "4",
        )
        .await;
    assert_eq!(mailer.count(), 0);

    browser
        .click(&format!("{row} button[data-action='resume']"))
        .await;
    let question = browser.accept_confirmation().await;
    assert!(
        question.starts_with("Resume handler mailer of signup?") && question.contains("4 messages"),
        "{question}"
    );
    mailer.wait_for(4).await;
    browser.until_text(&state, |t| t == "running").await;
    browser.until_text(&lag, |t| t == "0").await;

    browser.close().await;
    d.handle.shutdown().await.unwrap();
}

/// Whether `payments` is "fixed": until then its handler dead-letters every payment.
static PAYMENTS_FIXED: AtomicBool = AtomicBool::new(false);

fn payments(_: &EMessage) -> Ack {
    if PAYMENTS_FIXED.load(Ordering::SeqCst) {
        Ack::Ack
    } else {
        Ack::dead()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_replayed_by_a_click_leaves_the_list_and_is_handled() {
    let probe = Probe::new();
    let d = dashboard(vec![probe.handler("payments", "payments", payments)]).await;
    let id = d
        .bus
        .send("payments", r#"{"amount": 12}"#)
        .await
        .unwrap()
        .as_str()
        .to_owned();
    probe.wait_for(1).await;
    d.bus.wait_idle(WAIT).await.unwrap();
    assert_eq!(d.bus.dead_letters().await.unwrap().len(), 1);

    let browser = Browser::start().await;
    browser.open(d.http, ADMIN).await;
    browser.click("nav button[data-tab='dead']").await;
    let row = format!("#dead-letters tr[data-id='{id}']");
    let preview = browser
        .until_text(&format!("{row} td.preview"), |t| !t.is_empty())
        .await;
    assert_eq!(preview, r#"{"amount": 12}"#);

    // The handler is fixed; the operator replays the payment.
    PAYMENTS_FIXED.store(true, Ordering::SeqCst);
    browser
        .click(&format!("{row} button[data-action='replay']"))
        .await;
    let question = browser.accept_confirmation().await;
    assert!(
        question.contains(&id) && question.starts_with("Replay"),
        "{question}"
    );

    browser.until_gone(&row).await;
    probe.wait_for(2).await;
    assert!(d.bus.dead_letters().await.unwrap().is_empty());
    browser.click("nav button[data-tab='topics']").await;
    browser
        .until_text(
            "#topics tr[data-key='payments'] td[data-col='acked']",
            |t| t == "1",
        )
        .await;
    browser
        .until_text("[data-card='dead-letters'] .value", |t| t == "0")
        .await;

    browser.close().await;
    d.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_sees_no_buttons_and_its_post_is_refused() {
    let probe = Probe::new();
    let d = dashboard(vec![
        probe.handler("orders", "orders", ack),
        probe.handler("refunds", "refunds", |_| Ack::dead()),
    ])
    .await;
    let id = d
        .bus
        .send("refunds", "refund 7")
        .await
        .unwrap()
        .as_str()
        .to_owned();
    probe.wait_for(1).await;
    d.bus.wait_idle(WAIT).await.unwrap();

    let browser = Browser::start().await;
    browser.open(d.http, READ).await;
    assert_eq!(browser.until_text("#scope", |_| true).await, "read only");
    // The workers table is drawn, without its Stop buttons.
    browser.click("nav button[data-tab='workers']").await;
    browser
        .until_text(
            "#workers tr[data-key='orders-0'] td[data-col='name']",
            |t| t == "orders-0",
        )
        .await;
    assert_eq!(browser.count("#workers button[data-action]").await, 0);
    // The subscriptions table too: its state and lag, no Pause buttons.
    browser.click("nav button[data-tab='topics']").await;
    browser
        .until_text(
            "#subscriptions tr[data-key='orders/orders'] td[data-col='state']",
            |t| t == "running",
        )
        .await;
    assert_eq!(browser.count("#subscriptions button[data-action]").await, 0);

    browser.click("nav button[data-tab='dead']").await;
    let row = format!("#dead-letters tr[data-id='{id}']");
    browser
        .until_text(&format!("{row} td.preview"), |t| t == "refund 7")
        .await;
    for action in [
        "button[data-action='replay']",
        "button[data-action='delete']",
        "button[data-action='replay-edited']",
        "#replay-matching",
        "#purge-matching",
    ] {
        assert_eq!(browser.count(action).await, 0, "{action} is shown");
    }
    // Shown, read only: the payload, no form.
    browser
        .click(&format!("{row} button[data-action='show']"))
        .await;
    browser.until_text("#detail pre", |t| t == "refund 7").await;
    assert_eq!(browser.count("#detail textarea").await, 0);

    // The server refuses what the page does not offer.
    let path = format!("/api/dead-letter/{id}/replay");
    let refused = post_json(d.http, &path, Some(READ), "{}").await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.body.contains("admin token"), "{}", refused.body);
    let anonymous = post_json(d.http, &path, None, "{}").await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    assert_eq!(d.bus.dead_letters().await.unwrap().len(), 1, "still there");

    browser.close().await;
    d.handle.shutdown().await.unwrap();
}

/// A payment's payload, as the screenshots show it.
fn payment(n: u32) -> String {
    format!(
        r#"{{"payment": "pay_{n:04}", "amount": {}.{:02}, "currency": "EUR", "card": "declined"}}"#,
        10 + n * 7,
        n * 13 % 100
    )
}

/// The guide's screenshots (`event_base/guide/observability.md`, "Dashboard"): a bus with
/// some traffic, each main view saved as a PNG into `$EB_SCREENSHOTS` (relative to the
/// workspace root): `EB_SCREENSHOTS=docs/images cargo test -p event_base_grpc --test
/// dashboard_browser -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the guide's screenshots: run with EB_SCREENSHOTS=<dir> and --ignored"]
async fn screenshots_for_the_guide() {
    let dir = std::env::var_os("EB_SCREENSHOTS").expect(
        "set EB_SCREENSHOTS to the folder for the PNGs (docs/images: relative to the workspace root)",
    );
    // A relative folder is the workspace root's (cargo runs tests in the package's folder).
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let dir = workspace.join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let probe = Probe::new();
    let d = dashboard(vec![
        probe.handler("orders", "orders", ack).workers(3),
        probe.handler("order-audit", "orders", ack),
        probe.handler("emails", "emails", ack).workers(2),
        probe.handler("payments", "payments", |_| Ack::dead()),
    ])
    .await;
    for n in 0..7 {
        d.bus.send("payments", payment(n)).await.unwrap();
    }
    // One handler held back, so the subscriptions table shows a pause and a growing lag.
    d.bus.pause("orders", "order-audit").unwrap();
    // Traffic while the pictures are taken, so that rates show.
    let bus = d.bus.clone();
    let traffic = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for n in 0u64.. {
            tick.tick().await;
            let _ = bus.send("orders", format!(r#"{{"order": {n}}}"#)).await;
            if n % 3 == 0 {
                let email = format!(r#"{{"to": "customer-{n}@example.com"}}"#);
                let _ = bus.send("emails", email).await;
            }
        }
    });
    let browser = Browser::start().await;
    browser.client.set_window_size(1200, 760).await.unwrap();
    browser.open(d.http, ADMIN).await;
    // A few seconds of traffic (a few overviews), so the rate columns are filled.
    browser
        .until_text("#topics tr[data-key='orders'] td[data-col='sent']", |t| {
            t.replace(',', "").parse::<u32>().is_ok_and(|n| n >= 120)
        })
        .await;
    let save = |name: &str, png: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, &png).unwrap();
        println!("{}: {} bytes", path.display(), png.len());
    };
    save(
        "dashboard-topics.png",
        browser.client.screenshot().await.unwrap(),
    );

    browser.click("nav button[data-tab='workers']").await;
    let orders_0 = "#workers tr[data-key='orders-0'] td[data-col='name']";
    browser.until_text(orders_0, |t| t == "orders-0").await;
    save(
        "dashboard-workers.png",
        browser.client.screenshot().await.unwrap(),
    );

    browser.click("nav button[data-tab='dead']").await;
    browser
        .until_text("#page-info", |t| t.contains("7 matching"))
        .await;
    save(
        "dashboard-dead-letters.png",
        browser.client.screenshot().await.unwrap(),
    );
    browser
        .click("#dead-letters tbody tr:nth-child(3) button[data-action='show']")
        .await;
    browser
        .until_text("#detail dl", |t| t.contains("payments"))
        .await;
    let detail = browser.client.find(Locator::Css("#detail")).await.unwrap();
    save(
        "dashboard-dead-letter.png",
        detail.screenshot().await.unwrap(),
    );

    browser.click("nav button[data-tab='wal']").await;
    browser
        .until_text("#wal tr[data-key='state'] td", |t| t == "ok")
        .await;
    save(
        "dashboard-wal.png",
        browser.client.screenshot().await.unwrap(),
    );

    traffic.abort();
    browser.close().await;
    d.handle.shutdown().await.unwrap();
}
