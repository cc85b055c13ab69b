// Preloaded into Node test servers (`node --require ./loopback.cjs ...`): whatever port and
// host the server asks for, it listens on 127.0.0.1 on a free port, and prints
// `listening on <port>` to stderr so the test knows where to connect.
const net = require("node:net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = typeof args[args.length - 1] === "function" ? args.pop() : undefined;
  this.once("listening", () => {
    process.stderr.write(`listening on ${this.address().port}\n`);
  });
  return listen.call(this, { port: 0, host: "127.0.0.1" }, callback);
};
