import { describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import {
  bubblewrapArgv,
  CGROUP_LAUNCHER,
  commandArgv,
  DEFAULT_ETC,
  sandboxCwd,
  sandboxEnv,
  type BubblewrapConfig,
} from '../../src/sandbox/bubblewrap-argv.js';

const LIMITS = {
  cpuSeconds: 30,
  addressSpaceBytes: 1073741824,
  processes: 64,
  fileSizeBytes: 1048576,
  openFiles: 256,
  memoryBytes: 536870912,
  tmpBytes: 65536,
  workspaceBytes: 1048576,
  workspaceFiles: 100,
};

function config(overrides: Partial<BubblewrapConfig> = {}): BubblewrapConfig {
  return {
    bwrap: '/usr/bin/bwrap',
    setpriv: '/usr/bin/setpriv',
    prlimit: '/usr/bin/prlimit',
    dropTo: { uid: 65534, gid: 65534 },
    readOnly: ['/usr'],
    rootEntries: [
      { path: '/bin', symlinkTo: 'usr/bin' },
      { path: '/lib64', bind: true },
    ],
    etc: ['/etc/ld.so.cache', '/etc/passwd'],
    hostname: 'sandbox',
    workspace: '/data/workspaces/a1',
    cwd: '.',
    env: { PATH: '/usr/bin:/bin', HOME: '/workspace' },
    limits: LIMITS,
    command: ['/bin/sh', '-c', 'echo hi'],
    ...overrides,
  };
}

describe('bubblewrapArgv', () => {
  it('drops privileges, then enters bwrap, then applies prlimit inside, then the command', () => {
    expect(bubblewrapArgv(config())).toEqual([
      '/usr/bin/setpriv',
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      '--inh-caps=-all',
      '/usr/bin/bwrap',
      '--unshare-all',
      '--unshare-user',
      '--disable-userns',
      '--die-with-parent',
      '--new-session',
      '--cap-drop',
      'ALL',
      '--hostname',
      'sandbox',
      '--ro-bind',
      '/usr',
      '/usr',
      '--symlink',
      'usr/bin',
      '/bin',
      '--ro-bind',
      '/lib64',
      '/lib64',
      '--ro-bind-try',
      '/etc/ld.so.cache',
      '/etc/ld.so.cache',
      '--ro-bind-try',
      '/etc/passwd',
      '/etc/passwd',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--size',
      '65536',
      '--tmpfs',
      '/dev/shm',
      '--size',
      '65536',
      '--tmpfs',
      '/tmp',
      '--bind',
      '/data/workspaces/a1',
      '/workspace',
      '--chdir',
      '/workspace',
      '--remount-ro',
      '/dev',
      '--remount-ro',
      '/',
      '--clearenv',
      '--setenv',
      'PATH',
      '/usr/bin:/bin',
      '--setenv',
      'HOME',
      '/workspace',
      '--',
      '/usr/bin/prlimit',
      '--cpu=30',
      '--as=1073741824',
      '--nproc=64',
      '--fsize=1048576',
      '--nofile=256',
      '--',
      '/bin/sh',
      '-c',
      'echo hi',
    ]);
  });

  it('starts with bwrap when the runtime is not root', () => {
    const argv = bubblewrapArgv(config({ dropTo: null }));
    expect(argv[0]).toBe('/usr/bin/bwrap');
    expect(argv).not.toContain('/usr/bin/setpriv');
  });

  it('binds the workspace as the only writable host path, and never /root, /home or /etc/shadow', () => {
    const argv = bubblewrapArgv(config({ etc: DEFAULT_ETC }));
    const writable = argv.flatMap((a, i) => (a === '--bind' ? [argv[i + 1]] : []));
    expect(writable).toEqual(['/data/workspaces/a1']);
    for (const secret of ['/root', '/home', '/etc/shadow', '/etc/gshadow', '/etc']) expect(argv).not.toContain(secret);
    expect(argv).not.toContain('--share-net');
  });

  it('puts the whole command after the last `--`, unparsed', () => {
    const argv = bubblewrapArgv(config({ command: ['--ro-bind', '/', '/'] }));
    expect(argv.slice(-4)).toEqual(['--', '--ro-bind', '/', '/']);
  });

  it("joins the run's memory cgroup first, by a fixed launcher line, before dropping privileges", () => {
    const argv = bubblewrapArgv(
      config({
        cgroupProcs: [
          '/sys/fs/cgroup/memory/agentry/run-1/cgroup.procs',
          '/sys/fs/cgroup/cpuacct/agentry/run-1/cgroup.procs',
        ],
      }),
    );
    expect(argv.slice(0, 8)).toEqual([
      '/bin/sh',
      '-c',
      CGROUP_LAUNCHER,
      'sh',
      '/sys/fs/cgroup/memory/agentry/run-1/cgroup.procs',
      '/sys/fs/cgroup/cpuacct/agentry/run-1/cgroup.procs',
      '--',
      '/usr/bin/setpriv',
    ]);
    expect(() => bubblewrapArgv(config({ cgroupProcs: ['relative/cgroup.procs'] }))).toThrow(AgentryError);
  });

  it('binds the workspace read-only for an operation that only reads it', () => {
    const argv = bubblewrapArgv(config({ workspaceReadOnly: true }));
    expect(argv.slice(argv.indexOf('/data/workspaces/a1') - 1, argv.indexOf('/data/workspaces/a1') + 2)).toEqual([
      '--ro-bind',
      '/data/workspaces/a1',
      '/workspace',
    ]);
  });

  it('changes into a subdirectory of the workspace', () => {
    const argv = bubblewrapArgv(config({ cwd: 'src/app' }));
    expect(argv[argv.indexOf('--chdir') + 1]).toBe('/workspace/src/app');
  });

  it('refuses a relative workspace, bad limits and bad variable names', () => {
    expect(() => bubblewrapArgv(config({ workspace: 'ws' }))).toThrow(AgentryError);
    expect(() => bubblewrapArgv(config({ limits: { ...LIMITS, processes: 0 } }))).toThrow(/limits.processes/);
    expect(() => bubblewrapArgv(config({ limits: { ...LIMITS, cpuSeconds: 1.5 } }))).toThrow(/cpuSeconds/);
    expect(() => bubblewrapArgv(config({ limits: { ...LIMITS, tmpBytes: 0 } }))).toThrow(/tmpBytes/);
    expect(() => bubblewrapArgv(config({ env: { 'A=B': 'x' } }))).toThrow(AgentryError);
  });
});

describe('bubblewrapArgv mounts', () => {
  it('binds each mount after the workspace, read-only unless writable', () => {
    const argv = bubblewrapArgv(
      config({
        mounts: [
          { host: '/opt/claude/bin/claude', at: '/opt/agentry/claude' },
          { host: '/data/homes/a1', at: '/home/claude', writable: true },
        ],
      }),
    );
    const workspaceAt = argv.indexOf('/data/workspaces/a1');
    const ro = argv.indexOf('/opt/claude/bin/claude');
    const rw = argv.indexOf('/data/homes/a1');
    expect(argv.slice(ro - 1, ro + 2)).toEqual(['--ro-bind', '/opt/claude/bin/claude', '/opt/agentry/claude']);
    expect(argv.slice(rw - 1, rw + 2)).toEqual(['--bind', '/data/homes/a1', '/home/claude']);
    expect(ro).toBeGreaterThan(workspaceAt);
    expect(argv.indexOf('--clearenv')).toBeGreaterThan(rw);
  });

  it('refuses a mount over or around what the sandbox provides, and paths that are not plain absolute ones', () => {
    for (const at of ['/workspace', '/workspace/x', '/proc/sys', '/dev', '/tmp/x', '/usr/bin', '/etc', '/', '/lib']) {
      expect(() => bubblewrapArgv(config({ mounts: [{ host: '/data/x', at }] })), at).toThrow(AgentryError);
    }
    for (const host of ['data/x', '/data/../etc', '/data/x\0']) {
      expect(() => bubblewrapArgv(config({ mounts: [{ host, at: '/opt/x' }] })), host).toThrow(/normalised absolute/);
    }
    expect(() => bubblewrapArgv(config({ mounts: [{ host: '/data/x', at: '/opt' }] }))).not.toThrow();
  });
});

describe('sandboxCwd', () => {
  it('stays inside /workspace', () => {
    expect(sandboxCwd('.')).toBe('/workspace');
    expect(sandboxCwd('')).toBe('/workspace');
    expect(sandboxCwd('a/./b/')).toBe('/workspace/a/b');
    expect(sandboxCwd('a/../b')).toBe('/workspace/b');
    expect(() => sandboxCwd('..')).toThrow(AgentryError);
    expect(() => sandboxCwd('a/../../etc')).toThrow(AgentryError);
    expect(() => sandboxCwd('/etc')).toThrow(AgentryError);
  });
});

describe('commandArgv and sandboxEnv', () => {
  it('runs a shell line under /bin/sh -c, an argv as given', () => {
    expect(commandArgv({ shell: 'ls | wc -l' })).toEqual(['/bin/sh', '-c', 'ls | wc -l']);
    expect(commandArgv({ argv: ['node', '-e', '0'] })).toEqual(['node', '-e', '0']);
    expect(() => commandArgv({ argv: [] })).toThrow(AgentryError);
    expect(() => commandArgv({})).toThrow(AgentryError);
    expect(() => commandArgv({ argv: ['true'], shell: 'true' })).toThrow(AgentryError);
  });

  it('starts from PATH, HOME=/workspace and LANG=C.UTF-8 only', () => {
    const env = sandboxEnv({ FOO: 'bar', LANG: 'en_US.UTF-8' });
    expect(Object.keys(env).sort()).toEqual(['FOO', 'HOME', 'LANG', 'PATH']);
    expect(env.HOME).toBe('/workspace');
    expect(env.LANG).toBe('en_US.UTF-8');
  });
});
