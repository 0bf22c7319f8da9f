import socket, sys, json, time
port=int(sys.argv[1]); n=int(sys.argv[2]); kind=sys.argv[3] if len(sys.argv)>3 else "dispatch"
def req(s, method, path, body=b"", headers=""):
    msg=f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode()+body
    s.sendall(msg)
    buf=b""
    while b"\r\n\r\n" not in buf: buf+=s.recv(65536)
    head,rest=buf.split(b"\r\n\r\n",1)
    cl=int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
    while len(rest)<cl: rest+=s.recv(65536)
    return head, rest[:cl]
s=socket.create_connection(("127.0.0.1",port))
h,b=req(s,"POST","/v1/sessions"); j=json.loads(b); sid,tok=j["id"],j["token"]
auth=f"Authorization: Bearer {tok}\r\n"
body=b'{"feature":"counter","action":{"type":"increment"}}'
if kind=="toggle":
    # A list of 100 items of 200-byte titles (about 25 KB), then toggles of its first item.
    for i in range(100):
        _,b=req(s,"POST",f"/v1/sessions/{sid}/dispatch",json.dumps({"feature":"todos","action":{"type":"add","title":("item %d " % i).ljust(200,"x")}}).encode(),auth)
    first=json.loads(b)["state"]["items"][0]["id"]
    body=json.dumps({"feature":"todos","action":{"type":"toggle","id":first}}).encode()
t=time.time()
for i in range(n):
    if kind in ("dispatch","toggle"): req(s,"POST",f"/v1/sessions/{sid}/dispatch",body,auth)
    elif kind=="state": req(s,"GET",f"/v1/sessions/{sid}/state/counter",b"",auth)
    else: req(s,"GET","/healthz")
print(kind, n, "requests in", round(time.time()-t,2),"s")
