/** @uldp/device/react-native: the parts for React Native apps — a ledger store on AsyncStorage
 * (the transport is `FetchTransport` of `@uldp/device/web`; `Device.open` names any missing
 * platform primitive). No Node-only API, no React Native import (the app passes its AsyncStorage). */
export { type AsyncStorageLike, AsyncStorageStore } from "./asyncStorageStore.js";
