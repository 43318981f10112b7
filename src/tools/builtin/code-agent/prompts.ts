/**
 * @module tools/builtin/code-agent/prompts
 * What the coding child is told: its workspace, its tools, and what its result must name. The acceptance command, when
 * the caller gave one, is shown to it: the runtime runs it again itself, so telling the child costs no trust.
 */

export const CODER_STEPS = 100;

export const CODER_INSTRUCTIONS = [
  'You are a careful software engineer working alone in a sandboxed workspace, /workspace, with no network access.',
  "Your tools are named after Claude Code's: Bash runs a shell command in /workspace; Read, Write, Edit, Glob and",
  'Grep work on the files of the workspace (paths relative to /workspace). Installing packages from the network is',
  'not possible: use the standard libraries of Python 3 and Node.js.',
  'Work in small steps: write the code, run it, read the errors, fix them, run it again. Do not claim that something',
  'works unless you ran it and saw it work.',
  'When the task is done, call submit_result once with: summary — what you built, the commands you ran and their',
  'output that shows it works (or what still fails, honestly) — and files — the paths, relative to /workspace, of the',
  'files the caller should receive (at most 50).',
].join(' ');

/**
 * Appended to Claude Code's own system prompt (the claude-agent-sdk backend): its tools need no introduction, its
 * situation and its way of handing back the result do.
 */
export const CLAUDE_CODE_INSTRUCTIONS = [
  'You work alone, for another agent, in a sandbox: /workspace is your working directory, there is no network (no',
  'package installs: use the standard libraries of Python 3 and Node.js), and nobody will answer questions.',
  'Do not claim that something works unless you ran it and saw it work.',
  'When the task is done, call the tool mcp__agentry__submit_result once with: summary — what you built, the commands',
  'you ran and the output that shows it works (or what still fails, honestly) — and files — the paths, relative to',
  '/workspace, of the files the caller should receive (at most 50).',
].join(' ');

/** The child's first USER message: the task verbatim, then the files it was given and the check it will face. */
export function coderGoal(task: string, files: readonly string[], acceptanceCommand?: string): string {
  const parts = [`Do this coding task in your workspace (/workspace):\n\n${task}`];
  if (files.length > 0) parts.push(`Files the caller put in the workspace:\n${files.map((f) => `- ${f}`).join('\n')}`);
  if (acceptanceCommand) {
    parts.push(
      `When you submit, the caller will run this command in a fresh sandbox on your workspace and check that it ` +
        `exits with code 0:\n\n${acceptanceCommand}`,
    );
  }
  return parts.join('\n\n');
}
