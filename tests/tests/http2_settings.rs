//! The `http2_*` settings reach the wire: what a client reads in the gateway's SETTINGS frame
//! and its connection WINDOW_UPDATE.

use std::time::Duration;

use strait_e2e::h2_raw::RawH2;
use strait_e2e::{Gateway, GatewayOptions};

const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_FRAME_SIZE: u16 = 0x5;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http2_setting_is_in_the_settings_frame() {
    let options = GatewayOptions::new()
        .setting("http2_max_concurrent_streams", "50")
        .setting("http2_initial_stream_window_size", "256k")
        .setting("http2_initial_connection_window_size", "4m")
        .setting("http2_max_frame_size", "32k")
        .setting("client_max_header_size", "16384");
    let gw = Gateway::start(options).await;
    let mut conn = RawH2::connect(gw.proxy_addr()).await.expect("connect");
    let (settings, window) = conn.server_settings(Duration::from_secs(2)).await;
    let value = |id: u16| settings.iter().find(|(key, _)| *key == id).map(|(_, v)| *v);
    assert_eq!(value(MAX_CONCURRENT_STREAMS), Some(50), "{settings:?}");
    assert_eq!(value(INITIAL_WINDOW_SIZE), Some(256 * 1024), "{settings:?}");
    assert_eq!(value(MAX_FRAME_SIZE), Some(32 * 1024), "{settings:?}");
    assert_eq!(value(MAX_HEADER_LIST_SIZE), Some(16384), "{settings:?}");
    assert_eq!(window, Some(4 * 1024 * 1024 - 65_535), "the connection window");
}
