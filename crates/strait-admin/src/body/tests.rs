use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::Duration;

use http_body_util::BodyExt;

use super::*;

/// `len` bytes of a JSON string, written `step` bytes a call.
fn render_string(out: &mut PieceWriter, len: usize, step: usize, counted: &AtomicUsize) -> io::Result<()> {
    out.write_all(b"\"")?;
    let filler = vec![b'x'; step];
    let mut left = len - 2;
    while left > 0 {
        let now = left.min(step);
        out.write_all(&filler[..now])?;
        counted.fetch_add(now, Ordering::SeqCst);
        left -= now;
    }
    out.write_all(b"\"")
}

#[tokio::test]
async fn an_answer_within_one_piece_is_sent_whole_with_its_length() {
    let response = json_written(StatusCode::CREATED, |out| out.write_all(br#"{"a":1}"#)).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(matches!(response.body(), AdminBody::Whole(_)));
    assert_eq!(response.body().size_hint().exact(), Some(7));
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], br#"{"a":1}"#);
}

#[tokio::test]
async fn a_long_answer_waits_for_its_reader_and_arrives_whole() {
    let total = 40 * CHUNK + 123;
    let counted = Arc::new(AtomicUsize::new(0));
    let rendered = counted.clone();
    let response = json_written(StatusCode::OK, move |out| render_string(out, total, 1000, &rendered)).await;
    assert!(matches!(response.body(), AdminBody::Written(_)));
    assert_eq!(response.body().size_hint().exact(), None);
    // Nobody reads: the renderer stops once QUEUED pieces wait behind the
    // first, with one more in its hands (a piece is a write past CHUNK).
    let mut settled = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        settled = counted.load(Ordering::SeqCst);
    }
    assert!(
        settled <= (QUEUED + 2) * (CHUNK + 1000),
        "rendered {settled} bytes ahead of a reader that took none"
    );
    assert!(settled < total);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes.len(), total);
    assert!(bytes.starts_with(b"\"x") && bytes.ends_with(b"x\""));
    assert!(bytes[1..total - 1].iter().all(|&b| b == b'x'));
}

#[tokio::test]
async fn a_renderer_that_fails_midway_cuts_the_answer_and_one_that_fails_first_is_a_500() {
    let response = json_written(StatusCode::OK, |out| {
        out.write_all(&vec![b' '; 3 * CHUNK])?;
        Err(io::Error::other("rendering failed"))
    })
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.into_body().collect().await.is_err(),
        "a cut answer must not end cleanly"
    );

    let response = json_written(StatusCode::OK, |_| Err(io::Error::other("rendering failed"))).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn a_dropped_answer_stops_its_renderer() {
    let (done, finished) = std_mpsc::channel();
    let counted = Arc::new(AtomicUsize::new(0));
    let rendered = counted.clone();
    let response = json_written(StatusCode::OK, move |out| {
        let result = render_string(out, 1000 * CHUNK, 1000, &rendered);
        let _ = done.send(result.map_err(|error| error.kind()));
        Ok(())
    })
    .await;
    drop(response);
    let result = tokio::task::spawn_blocking(move || finished.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(result, Ok(Err(io::ErrorKind::BrokenPipe)));
    assert!(counted.load(Ordering::SeqCst) < 1000 * CHUNK);
}

#[tokio::test]
async fn an_answer_gathered_for_an_http10_client_is_whole_with_its_length_or_a_500() {
    let total = 5 * CHUNK + 7;
    let counted = Arc::new(AtomicUsize::new(0));
    let response = json_written(StatusCode::CREATED, move |out| {
        render_string(out, total, 1000, &counted)
    })
    .await;
    assert!(matches!(response.body(), AdminBody::Written(_)));
    let response = gathered(response).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(matches!(response.body(), AdminBody::Whole(_)));
    assert_eq!(response.body().size_hint().exact(), Some(total as u64));
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes.len(), total);

    let cut = json_written(StatusCode::CREATED, |out| {
        out.write_all(&vec![b' '; 3 * CHUNK])?;
        Err(io::Error::other("rendering failed"))
    })
    .await;
    assert_eq!(gathered(cut).await.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn answers_past_the_limit_are_turned_away_until_one_is_done() {
    static LIMIT: Semaphore = Semaphore::const_new(2);
    let busy = || crate::response::message(StatusCode::SERVICE_UNAVAILABLE, "busy");
    let long = |out: &mut PieceWriter| render_string(out, 40 * CHUNK, 1000, &AtomicUsize::new(0));
    let respond = |body: AdminBody| AdminResponse::new(body);
    // Two long answers nobody reads hold both permits.
    let first = written_within(&LIMIT, busy, long, respond).await;
    let second = written_within(&LIMIT, busy, long, respond).await;
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
    let third = written_within(&LIMIT, busy, long, respond).await;
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    // One read to its end gives its permit back once its renderer is done.
    assert_eq!(first.into_body().collect().await.unwrap().to_bytes().len(), 40 * CHUNK);
    let mut again = None;
    for _ in 0..200 {
        let response = written_within(&LIMIT, busy, long, respond).await;
        if response.status() == StatusCode::OK {
            again = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(again.is_some(), "the permit of a finished answer came back");
    // A dropped one too.
    drop(second);
    drop(again);
    for _ in 0..200 {
        if LIMIT.available_permits() == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} permits back of 2", LIMIT.available_permits());
}
