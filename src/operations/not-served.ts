// Operations of the product's API that a self-hosted Sigil will never serve: services the product runs
// on its own infrastructure or with its commercial partners. A program calling one gets 501
// OPERATION_NOT_SERVED saying so, not a 404 that reads like a typo or like a feature still to come.
// Operations Sigil will serve later do not belong here: until they are built they answer 404 like any
// unknown path. The routes (http/server.ts) and docs/operations.md derive from this table.
import { type ServiceError, serviceError } from "../errors.js";
import { swagger } from "../registry/registry.js";

export interface NotServedOperation {
  /** The full path, e.g. /public/v1/submit/earn_deposit */
  path: string;
  /** What the product provides there, and why only the product can. */
  service: string;
}

const submit = (name: string) => `/public/v1/submit/${name}`;
const query = (name: string) => `/public/v1/query/${name}`;

/** By service: what it is, then its paths. */
const HOSTED_ONLY: Array<{ service: string; paths: string[] }> = [
  {
    service: "TVC, its verifiable cloud: apps, deployments and their quorum keys run in the product's enclave cluster",
    paths: [
      query("get_app_status"),
      query("get_tvc_app"),
      query("get_tvc_deployment"),
      query("get_tvc_deployment_debug_logs"),
      query("get_tvc_deployment_provisioning_details"),
      query("get_tvc_qos_versions"),
      query("list_tvc_app_deployments"),
      query("list_tvc_apps"),
      query("validate_tvc_image"),
      submit("create_tvc_app"),
      submit("create_tvc_deployment"),
      submit("create_tvc_manifest_approvals"),
      submit("create_tvc_operator"),
      submit("create_tvc_quorum_key"),
      submit("delete_tvc_app_and_deployments"),
      submit("delete_tvc_deployment"),
      submit("post_tvc_quorum_key_share"),
      submit("re_encrypt_tvc_quorum_key_share"),
      submit("restore_tvc_deployment"),
      submit("set_tvc_app_live_deployment"),
    ],
  },
  {
    service: "attestations of its secure enclaves, boot proofs and app proofs; Sigil runs in no enclave, so it has none to attest",
    paths: [query("get_boot_proof"), query("get_latest_boot_proof"), query("list_app_proofs")],
  },
  {
    service: "Earn, yield vaults it runs with its DeFi partners",
    paths: [
      query("get_claim_earn_fees_status"),
      query("get_earn_deploy_status"),
      query("get_earn_deposit_status"),
      query("get_earn_withdraw_status"),
      query("list_earn_enabled_vaults"),
      query("list_earn_positions"),
      query("list_earn_vaults"),
      submit("claim_earn_fees"),
      submit("earn_deploy_wrapper"),
      submit("earn_deposit"),
      submit("earn_set_wrapper_state"),
      submit("earn_withdraw"),
    ],
  },
  {
    service: "token swaps, quoted and executed through its swap providers",
    paths: [
      query("get_swap_status"),
      submit("claim_swap_fees"),
      submit("create_swap_quote"),
      submit("execute_swap"),
      submit("upsert_swap_config"),
    ],
  },
  {
    service: "fiat on-ramp providers it has agreements with",
    paths: [
      query("get_onramp_transaction_status"),
      query("list_fiat_on_ramp_credentials"),
      submit("create_fiat_on_ramp_credential"),
      submit("update_fiat_on_ramp_credential"),
      submit("delete_fiat_on_ramp_credential"),
      submit("init_fiat_on_ramp"),
    ],
  },
  {
    service: "Spark, its link to the Spark Bitcoin layer-2 network's operators",
    paths: [
      submit("spark_claim_transfer"),
      submit("spark_prepare_lightning_receive"),
      submit("spark_prepare_transfer"),
      submit("spark_sign_frost"),
    ],
  },
  {
    service: "gas sponsorship: network fees it pays for its customers' transactions and bills in US dollars",
    paths: [query("get_gas_usage")],
  },
  {
    service: "tooling of its own deployment: feature-flag caches, rate-limit tests, code generation",
    paths: ["/tkhq/api/v1/noop-codegen-anchor", "/tkhq/api/v1/refresh_feature_flags", "/tkhq/api/v1/test_rate_limits"],
  },
];

/** Whether the product's API description (the edition @turnkey/http is generated from) has the path. */
export function inProductApi(path: string): boolean {
  const [, kind, name] = /^\/public\/v1\/(submit|query)\/(.+)$/.exec(path) ?? [];
  if (kind === "submit") return name! in swagger.submits;
  if (kind === "query") return name! in swagger.queries;
  return swagger.otherPaths.includes(path);
}

export const notServedOperations: NotServedOperation[] = HOSTED_ONLY.flatMap(({ service, paths }) =>
  paths.map((path) => ({ path, service })),
);

// A path the product does not have is an unknown path (404), never "not served".
for (const { path } of notServedOperations) {
  if (!inProductApi(path)) throw new Error(`${path} is not in the product's API description: it cannot be a not-served operation`);
}

/** The answer to every request for `operation`: given before the stamp is checked, since it tells
 * nothing the product's public API description does not already say. */
export function notServedError(operation: NotServedOperation): ServiceError {
  return serviceError(
    "OPERATION_NOT_SERVED",
    `${operation.path} is a hosted-only service of the product (${operation.service}); a self-hosted Sigil does not provide it`,
  );
}
