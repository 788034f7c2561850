"""A replica's moving parts, built once and in one order by ``Runtime`` (runtime/wiring.py).

A scheduled Run passes seven stages from its due time to DISPATCHED. Each stage is one
step in one of six modules of this package, and each step calls only down the list (the
ticker fires the firing, the firing hands over to the dispatcher, the dispatcher asks the
gate; nothing calls back up):

============  ==========================================================================
stage         where, and what has become true
============  ==========================================================================
due           ``Ticker._owned_due`` (ticker.py): the calendar's instant has come on the
              store's clock (``ServerClock.now``: the host's clock corrected by the
              offset the server's timestamps prove).
owned         ``Membership.owns_due`` (membership.py): this replica owns the due time
              among the live replicas, or ``Ticker._fallbacks_due`` takes over a due
              time its owner left unfired.
fresh         ``Freshness.confirm`` (freshness.py): the Schedule table is proven to hold
              every stored Schedule event, so ``Firing.fire_due`` may read the Schedule
              from it (else it reads the stream leader).
created       ``Firing.fire_due`` / ``Firing.fire_many`` (firing.py): the Run is
              announced (``RunLog.announce``) and its ``run.created`` stored once for
              all replicas (``RunLog.create``).
claimed       ``Firing._hand_over`` -> ``Dispatcher.submit`` with a ``Claimed`` (the lease
              the announcement opened, the create's sequence, the stored record).
started       ``Dispatcher._attempt`` (dispatcher.py), after ``PauseGate.may_start``
              (gate.py) once: ``handler.start_session`` called and ``run.session_started``
              stored.
dispatched    ``Dispatcher._attempt``: ``handler.admit_turn`` called and ``run.dispatched``
              stored; the lease key expires by its TTL.
============  ==========================================================================

"Hold" means one thing in this code base: an operator's hold on a Schedule. What a replica
has over a Run is its *lease*, and a Run handed over with its lease is *claimed*.
docs/architecture.md ("The path of one Run, through the files") follows the same path
with the store's side of each step.
"""
