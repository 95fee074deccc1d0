"""A local Flotilla desktop driven by E2B's own Desktop SDK (PyPI
`e2b-desktop`), unchanged: flotilla-sandboxd speaks E2B's protocol, so only
the addresses and the key differ. Run it with the four variables
`scripts/demo.sh --keep` prints (E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN,
E2B_API_KEY)."""

from e2b_desktop import Sandbox

desktop = Sandbox.create(resolution=(1024, 768), timeout=300)
print("sandbox", desktop.sandbox_id, "screen", desktop.get_screen_size())
desktop.commands.run("xterm -e 'echo hello from the e2b sdk; bash' &", background=True)
desktop.wait(1000)
desktop.write("echo typed through xdotool")
desktop.press("enter")
with open("desktop.png", "wb") as file:
    file.write(desktop.screenshot())
print("screenshot in desktop.png")
desktop.stream.start()
url = desktop.stream.get_url()
# The host serves plain HTTP on the edge's port: open the stream there.
edge_port = __import__("os").environ["E2B_SANDBOX_URL"].rsplit(":", 1)[1]
print("watch it:", url.replace("https://", "http://").replace(".localhost/", f".localhost:{edge_port}/"))
input("press Enter to end the sandbox ")
desktop.kill()
