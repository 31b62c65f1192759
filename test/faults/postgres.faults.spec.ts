import { postgresFaultStore } from './harness/stores.js';
import { describeSqlFaults } from './sql-faults.js';

describeSqlFaults('PostgreSQL', postgresFaultStore);
