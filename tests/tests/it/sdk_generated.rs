//! The SDKs' generated models follow the API: regenerating them from the
//! `/openapi.json` a fleet serves (`sdk/generate.sh --from`) gives exactly
//! the committed `sdk/python/flotilla/models.py` and
//! `sdk/typescript/src/schema.ts`, so a change to the API that is not
//! regenerated fails the test command.

use flotilla_tests::sdk::{assert_same_file, regenerate, repo_root};
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, RedisServer};

#[tokio::test(flavor = "multi_thread")]
async fn regenerating_from_the_served_document_leaves_both_sdks_unchanged() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    ApiClient::when_ready(&api, api_key()).await;
    let out = regenerate(&api.base_url).await;
    let sdk = repo_root().join("sdk");
    assert_same_file(&out.path().join("python/flotilla/models.py"), &sdk.join("python/flotilla/models.py"));
    assert_same_file(&out.path().join("typescript/src/schema.ts"), &sdk.join("typescript/src/schema.ts"));
}
