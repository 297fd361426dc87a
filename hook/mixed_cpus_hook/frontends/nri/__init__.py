"""NRI mode: the long-running plugin for containerd and CRI-O (``mixed-cpus-hook nri``).

The second front end over the engine (hook mode's is ``fastpath``): ``mux`` and ``ttrpc``
are the wire, ``api`` the NRI messages, ``handlers`` turns them into engine calls, ``plugin``
is the connection loop. Nothing on the hook's createRuntime path imports this package (it
needs protobuf).
"""
