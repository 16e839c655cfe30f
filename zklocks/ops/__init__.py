"""Operations: the read model of locks and queues, force-release, the reaper, the ACL audit and its checks, the
wait-for graph, the queue chart, and the text that the admin and the commands render."""
