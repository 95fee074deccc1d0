"""Prints the demo's browser task: a one-page web shop placed by the task's
set-up, whose order form the scripted agent fills and sends in Chromium;
the shop hands back a receipt as a download (stored as a file of the task),
and the task's check reads the receipt."""

import json

SHOP = """<!doctype html><html><head><meta charset="utf-8"><title>Demo shop</title>
<style>body{font:20px sans-serif;margin:40px;background:#f4f7fb}h1{color:#2456a6}
input{font:20px sans-serif;display:block;margin:8px 0 20px;padding:6px;width:420px}
button{font:20px sans-serif;padding:8px 24px;background:#2456a6;color:#fff;border:0}</style></head>
<body><h1>Demo shop: order form</h1><form id="order">
<label>Name<input id="name" autofocus required></label>
<label>Quantity<input id="qty" type="number" min="1" required></label>
<button type="submit">Order</button></form><p id="done"></p>
<script>
document.getElementById('order').addEventListener('submit', e => {
  e.preventDefault();
  const name = document.getElementById('name').value, qty = document.getElementById('qty').value;
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob(['order for ' + name + ': ' + qty + '\\n'], {type: 'text/plain'}));
  a.download = 'receipt.txt';
  document.body.appendChild(a);
  a.click();
  document.getElementById('done').textContent = 'Thank you, ' + name + '. Your receipt is downloading.';
});
</script></body></html>"""

# Waits up to 10 s for the receipt, then reads it.
CHECK = (
    "for _ in $(seq 100); do test -s Downloads/receipt.txt && break; sleep 0.1; done; "
    "grep -qx 'order for Ada: 3' Downloads/receipt.txt"
)

print(json.dumps({
    "prompt": "order 3 items for Ada in the demo shop and keep the receipt",
    "sandbox": {"template": "browser"},
    "setup": {"files": {"shop/index.html": SHOP}, "commands": ["ln -sfn \"$HOME/shop\" /tmp/shop"]},
    "actions": [
        {"type": "keypress", "keys": ["ctrl", "l"]},
        {"type": "type", "text": "file:///tmp/shop/index.html\n"},
        {"type": "wait", "ms": 1500},
        {"type": "type", "text": "Ada"},
        {"type": "keypress", "keys": ["Tab"]},
        {"type": "type", "text": "3\n"},
        {"type": "wait", "ms": 1000},
    ],
    "check": {"command": CHECK},
}))
