#!/usr/bin/env python3
"""What a session's scoped tokens cost at their bounds (issue 36): starts the server binary
(argument 1; argument 2, optional, a --storage value such as sqlite:/tmp/x.db) on 127.0.0.1
port 0, makes N sessions (default 20) and fills each with tokens until the server refuses one
more (409): MODE=big mints grants of 100 action types (about 3.5 KB each) first, MODE=small
observe tokens only. Prints the RSS added per session and the largest GET .../tokens listing.

    N=10 python3 bench/token-memory.py .build/release/state-server
    MODE=small N=10 python3 bench/token-memory.py .build/release/state-server sqlite:/tmp/t.db
"""
import json, subprocess, sys, time, urllib.request, os
binary=sys.argv[1]; storage=sys.argv[2] if len(sys.argv)>2 else None
args=[binary,'--host','127.0.0.1','--port','0']+(['--storage',storage] if storage else [])
env=dict(os.environ, STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE='0', STATE_SERVER_LIMITS_REQUESTS_PER_SECOND='0')
p=subprocess.Popen(args,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,env=env)
line=p.stdout.readline().decode(); port=int(line.strip().rsplit(':',1)[1])
base=f'http://127.0.0.1:{port}'
def req(m,path,body=None,tok=None):
    r=urllib.request.Request(base+path,method=m,data=json.dumps(body).encode() if body is not None else None)
    if tok: r.add_header('Authorization','Bearer '+tok)
    try:
        with urllib.request.urlopen(r) as resp: return resp.status, resp.read()
    except urllib.error.HTTPError as e: return e.code, e.read()
def rss():
    for l in open(f'/proc/{p.pid}/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])
types=['t%d-'%i+'y'*28 for i in range(100)]
N=int(os.environ.get('N','20'))
sessions=[]
for i in range(N):
    s,b=req('POST','/v1/sessions'); j=json.loads(b); sessions.append((j['id'],j['token']))
    req('GET',f"/v1/sessions/{j['id']}/state", tok=j['token'])
time.sleep(1); r0=rss()
minted=0; listing=0
for sid,tok in sessions:
    while os.environ.get('MODE','big')=='big':
        s,b=req('POST',f'/v1/sessions/{sid}/tokens',{'scope':'dispatch','actions':{'todos':types}},tok)
        if s!=201: break
        minted+=1
    # fill the rest with small tokens until the count or the bytes run out
    while True:
        s,b=req('POST',f'/v1/sessions/{sid}/tokens',{'scope':'observe'},tok)
        if s!=201: break
        minted+=1
    s,b=req('GET',f'/v1/sessions/{sid}/tokens',None,tok); listing=max(listing,len(b))
time.sleep(1); r1=rss()
print(f"sessions {N}, tokens minted {minted} ({minted/N:.0f} per session), RSS +{(r1-r0)/N:.0f} KiB per session, largest listing {listing} bytes")
p.terminate(); p.wait()
