/** @uldp/device/node: the Node-only parts (gRPC transport, file ledger store); importing it
 * registers every query kind (../kinds/all.ts): a Node device answers any task. */
import "../kinds/all.js";
export {
  DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_RETRY, DeviceTransport, encodeSubmitReport, grpc, RETRYABLE, wire,
  RpcError, type EndpointOptions, type GetTasksResult, type ReportMessage, type RetryPolicy,
  type SealedReportMessage, ShufflerTransport, type TaskMessage,
} from "./transport.js";
export { FileStore } from "./fileStore.js";
