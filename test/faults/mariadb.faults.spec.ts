import { mariadbFaultStore } from './harness/stores.js';
import { describeSqlFaults } from './sql-faults.js';

describeSqlFaults('MariaDB', mariadbFaultStore);
