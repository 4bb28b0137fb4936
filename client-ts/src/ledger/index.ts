export {
  AlreadyParticipated, BudgetExceeded, budgetUnits, decodeValues, encodeValues, EPS_UNITS_PER_ONE,
  Ledger, LedgerError, MemoryStore, type EntryState, type LedgerEntry, type LedgerStore,
} from "./ledger.js";
