/** @uldp/device/web: the parts for browsers and React Native (fetch transport, IndexedDB store);
 * no Node-only API. */
export {
  codeOfConnect, codeOfHttpStatus, type FetchLike, FetchShufflerTransport, FetchTransport, type FetchTransportOptions, type HttpProtocol,
  NetworkError, type NetworkProblem, networkFailure,
} from "./transport.js";
export { type IdbFactoryLike, IndexedDbStore } from "./indexedDbStore.js";
export {
  Code, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_RETRY, encodeSubmitReport, RETRYABLE, RpcError, type RetryPolicy,
} from "../wire/index.js";
export { probeCollector, type ProbeFetch, type ProbeOptions, type ProbeProblem, type ProbeResult } from "./probe.js";
