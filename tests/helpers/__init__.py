"""What the tests share, each in one place, imported by name (``from helpers.waiting import until``).

    service_node  ServiceNode: a node built in the test's process (scene, state dir, probe,
                  runtime, lock, allocator, service), made by conftest's make_node
    allocators    build_allocator: the product's allocator over the parts a test names
    dashboard     the app that remembers what it said, DashboardNode (a ServiceNode as the
                  dashboard serves one), and reading the screen
    waiting       until, until_async, until_pilot: wait for what a test expects, within a bound
    callers       ALICE, BOB, ROOT: the callers the tests name by hand
    accounts      real Unix accounts made for the session, and the product where they can run it
    agents        a test agent in the test's loop (Agent), and one run as root for real
                  accounts (SharedNode)
    fleet         snapshots and publications as the fleet's code makes them, an agent process
    services      a redis-server and a dockerd of the tests' own; write_scene, a simulated node
    fakes         a runtime kept in memory and a probe with a prepared reading
    nvml          an in-memory pynvml
    placement     a set's score and which search placement uses, to check the search by
    load          CLI processes on a simulated node, the samplers that watch it, the clean-up;
                  run as a script, the CLI with a fault at a chosen moment
    ssh           an sshd of the tests' own, and accounts set up to log in with keys
    lock_worker   a process that takes the allocation lock (run as a script)
    paths         where the checkout, the stubs and the captures are

The tests are in tiers, a folder each (tests/unit, service, tui, system;
tests/conftest.py marks each test with its folder's). pytest finds this package
from every tier because tests/ is on its path (tests/ is no package, so pytest
puts it first on ``sys.path`` to import tests/conftest.py); bench/common.py puts
tests/ there too. The fixtures many modules use are in tests/conftest.py. Data
the tools find by path stays beside the tests: tests/stubs/ (the nvidia-smi
stub, put first on PATH), tests/captures/ (real nodes' output), and
pytest-textual-snapshot's pictures beside the modules they belong to
(tests/tui/__snapshots__/<module>/).
"""
