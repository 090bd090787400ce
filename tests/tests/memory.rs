//! Old snapshots are freed: posting a config a thousand times leaves memory where it was.

use std::time::Duration;

use strait_e2e::declarative::many_routes;
use strait_e2e::{get, send_h1, within, Gateway, GatewayOptions};

const POSTS: usize = 1000;
const WARM_UP: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_config_posts_do_not_grow_memory() {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let post = |n: usize| {
        let gw = &gw;
        async move {
            let body = many_routes(50, &format!("v{n}")).to_string().into_bytes();
            let reply = gw.post_config_as("/config", "application/json", body).await;
            assert_eq!(reply.status, 201, "post {n}: {}", reply.text());
        }
    };
    // The baseline is taken once the allocator and the store have warmed up
    // (WARM_UP posts): the node returns free memory to the OS after each
    // post, so RSS after the very first one is the bare minimum, and the
    // first posts grow the allocator's and LMDB's working set by a few MB
    // once. A leak grows with every post, so it shows over the remaining
    // POSTS - WARM_UP posts all the same.
    for n in 0..WARM_UP {
        post(n).await;
    }
    gw.proxy(get("/version")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = gw.rss_kib();

    within(Duration::from_secs(400), "1000 config posts", async {
        for n in WARM_UP..POSTS {
            post(n).await;
            if n % 100 == 0 {
                // Keep the proxy using snapshots while they are swapped.
                assert_eq!(gw.proxy(get("/r1")).await.status, 200);
            }
        }
    })
    .await;
    let proxy = gw.proxy_addr();
    let last = format!("v{}", POSTS - 1);
    strait_e2e::eventually(Duration::from_secs(5), "last config served", || {
        let last = last.clone();
        async move {
            let reply = send_h1(proxy, get("/version")).await?;
            anyhow::ensure!(reply.message() == Some(last), "served {}", reply.text());
            Ok(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = gw.rss_kib();
    assert!(
        after * 10 <= first * 11,
        "RSS grew from {first} KiB after {WARM_UP} posts to {after} KiB after {POSTS} posts (> 10%)"
    );
}
