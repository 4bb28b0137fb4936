export {
  AlreadyParticipated, BudgetExceeded, budgetUnits, decodeValues, encodeValues, EPS_UNITS_PER_ONE,
  Ledger, LedgerError, recordReport, MemoryStore, type DeviceStore, type EntryState, type LedgerChange,
  type LedgerEntry, type LedgerStore,
} from "./ledger.js";
export { type ContractCase, ledgerStoreContract, type StoreUnderTest } from "./contract.js";
