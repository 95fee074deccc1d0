//! Many tasks storing overlapping screenshots at once, against a real
//! `s3s-fs`: every distinct image ends up stored exactly once, and every
//! task's list holds all its screenshots in the order it took them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flotilla_blobstore::{content_hash, BlobStore, StoredImage, Uploader, UploaderOptions};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::unique_prefix;

const TASKS: usize = 20;
const SHARED: u32 = 5;

/// A PNG-signed blob unique to `seed`.
fn png(seed: u32) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    bytes.extend((0..20_000u32).map(|i| (i.wrapping_mul(17).wrapping_add(seed.wrapping_mul(104_729)) % 253) as u8));
    bytes.extend(seed.to_le_bytes());
    bytes
}

/// Task `n`'s screenshots: the shared images in an order of its own, with
/// its unique one somewhere among them.
fn trajectory(n: usize) -> Vec<Vec<u8>> {
    let mut images: Vec<Vec<u8>> = (0..SHARED).map(png).collect();
    images.rotate_left(n % SHARED as usize);
    images.insert(n % (SHARED as usize + 1), png(1_000 + n as u32));
    images
}

/// Runs every task through its own uploader on `stores[n % stores.len()]`,
/// all at once; returns each task's expected hashes and stored list.
async fn run_tasks(stores: &[BlobStore]) -> Vec<(Vec<String>, Vec<StoredImage>)> {
    let mut handles = Vec::new();
    for n in 0..TASKS {
        let store = stores[n % stores.len()].clone();
        handles.push(tokio::spawn(async move {
            let options =
                UploaderOptions { queue: 2, parallel: 3, deadline: Duration::from_secs(30), ..UploaderOptions::default() };
            let uploader = Uploader::spawn(store, options);
            let mut expected = Vec::new();
            for image in trajectory(n) {
                let queued = uploader.enqueue(image).await.expect("enqueue");
                assert_eq!(queued.seq as usize, expected.len());
                expected.push(queued.hash);
            }
            let stored = uploader.flush().await.expect("flush");
            (expected, stored)
        }));
    }
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("task"));
    }
    results
}

/// The checks every variant makes: complete ordered lists, one object per
/// distinct image, each object holding the right bytes.
async fn assert_stored_once(store: &BlobStore, results: &[(Vec<String>, Vec<StoredImage>)]) {
    for (n, (expected, stored)) in results.iter().enumerate() {
        let hashes: Vec<&str> = stored.iter().map(|s| s.hash.as_str()).collect();
        assert_eq!(hashes, expected.iter().map(String::as_str).collect::<Vec<_>>(), "task {n}'s list is complete and in order");
        let want: Vec<String> = trajectory(n).iter().map(|i| content_hash(i)).collect();
        assert_eq!(expected, &want, "task {n}");
    }
    let listed = store.list(&store.layout().screenshots()).await.expect("list");
    let keys: HashSet<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(listed.len(), keys.len());
    assert_eq!(listed.len(), SHARED as usize + TASKS, "each distinct image is stored once: {listed:?}");
    let distinct: HashSet<&str> = results.iter().flat_map(|(_, s)| s.iter().map(|i| i.key.as_str())).collect();
    assert_eq!(keys, distinct);
    for object in &listed {
        let bytes = store.get(&object.key).await.expect("get");
        let hash = content_hash(&bytes);
        assert!(object.key.ends_with(&format!("{hash}.png")), "{} holds other bytes", object.key);
    }
}

/// How many tasks reported each hash as newly stored.
fn first_stores(results: &[(Vec<String>, Vec<StoredImage>)]) -> HashMap<String, usize> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (_, stored) in results {
        for image in stored {
            *counts.entry(image.hash.clone()).or_default() += usize::from(!image.dedup);
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_in_one_worker_upload_each_image_once() {
    let server = S3Server::start();
    let store = server.store(&unique_prefix());
    let results = run_tasks(std::slice::from_ref(&store)).await;
    assert_stored_once(&store, &results).await;
    for (hash, count) in first_stores(&results) {
        assert_eq!(count, 1, "exactly one task stored {hash}; the others saw a duplicate");
    }
    let stats = store.stats();
    assert_eq!(stats.screenshots, (TASKS * (SHARED as usize + 1)) as u64);
    assert_eq!(stats.uploads, (SHARED as usize + TASKS) as u64, "{stats:?}");
    assert_eq!(stats.put_requests, stats.uploads, "concurrent puts of one image wait for the first: {stats:?}");
}

/// Four workers with no memory of recent hashes: only the store's
/// conditional PUT keeps the images single.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_across_workers_store_each_image_once() {
    let server = S3Server::start();
    let prefix = unique_prefix();
    let stores: Vec<BlobStore> = (0..4)
        .map(|_| {
            let mut config = server.config(&prefix);
            config.recent_hashes = 0;
            BlobStore::new(config)
        })
        .collect();
    let results = run_tasks(&stores).await;
    assert_stored_once(&stores[0], &results).await;
    for (hash, count) in first_stores(&results) {
        assert!((1..=stores.len()).contains(&count), "{hash} reported new by {count} tasks");
    }
    let duplicates: u64 = stores.iter().map(|s| s.stats().dedup_store).sum();
    assert!(duplicates > 0, "the store reported duplicates with 412");
}
