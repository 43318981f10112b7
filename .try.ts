import { mkdirSync } from 'node:fs';
import { installOffline, sh } from './test/first-use/offline-install.js';
const dir = '/tmp/fu'; const project = `${dir}/app`;
mkdirSync(project, { recursive: true });
await sh('npm', ['init', '-y'], { cwd: project });
const t0 = Date.now();
await installOffline('/work/wt/page', project, '../agentry-0.1.0.tgz');
console.log('installed in', Date.now() - t0, 'ms');
