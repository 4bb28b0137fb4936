/** @uldp/device/device: the app-facing Device over an injected transport (no Node-only API). */
export {
  Device, DeviceError, runDevice, EnrollmentError, ReportRejected, Status, type DeclineMessage, type DeviceOptions, type DeviceStore,
  type DeviceTransportLike, type Identity, type PollResult, type ReportMessage, type TaskMessage,
  type AnyReport, type SealedReportMessage, type ShufflerTransportLike,
} from "./device.js";
export {
  checkWindow, DEADLINE_MARGIN_MS, DEFAULT_SEND_DELAY, drawDelayMs, MAX_WINDOW_MS, type PollOptions, type SendDelay,
} from "./schedule.js";
export { checkPlatform, missingPrimitives, PlatformError, PLATFORM_HINTS } from "./platform.js";
