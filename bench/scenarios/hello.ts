/** The reference server of the poll scenario: a bare node:http hello-world. Sends its URL to the parent. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end('{"hello":"world"}');
});
server.listen(0, '127.0.0.1', () => process.send!(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`));
