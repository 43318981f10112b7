import { memoryStorage } from '../../src/storage/memory.js';
import { storageContract } from './contract.js';

storageContract('memory', async () => ({ storage: memoryStorage() }));
