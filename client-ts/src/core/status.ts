/**
 * gRPC status codes and the device contract's one retry rule (docs/device-protocol.md §10,
 * proto/uldp/v1/device.proto "Status codes"; Python: uldp.client.transport.RETRYABLE): the codes
 * that say nothing happened, or that the outcome is unknown, are retried with the identical
 * request bytes (every device call is idempotent); after the last attempt a report stays
 * pending and is re-sent at the next poll. Every other code is the collector's definitive
 * answer (UNAUTHENTICATED: re-enrol once). Pure: shared by the Device and every transport.
 */
export const Status = {
  OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5,
  ALREADY_EXISTS: 6, PERMISSION_DENIED: 7, RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9, ABORTED: 10,
  OUT_OF_RANGE: 11, UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14, DATA_LOSS: 15, UNAUTHENTICATED: 16,
} as const;

export const RETRYABLE: ReadonlySet<number> = new Set<number>([
  Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.ABORTED, Status.RESOURCE_EXHAUSTED, Status.INTERNAL,
]);
