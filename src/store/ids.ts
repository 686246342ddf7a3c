// Row ids, for every layer that makes rows (operations, the pipeline, the deployment's service keys).
import { v7 as uuidv7 } from "uuid";

/** Time-ordered (UUIDv7) so that records made in the same millisecond still list in creation order. */
export const newId = () => uuidv7();
