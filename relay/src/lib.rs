//! flagstream relay: the server that holds flags and streams them to SDKs. Built in issue 3; nothing here yet.
