{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI3YTcxNGE4NzI0NWVlODBmM2UwNzUxNmQ1MTMyMmIwNmJlMWJhNjAzODk3NzIwZDRhZTExZThhODg0MzkxNjFhIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtY3B1LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "/Ud6w9enr2zvYYkTwRJFu68K0/0VC5I9C6asLusW4CxYKgFK7aUpp2Z6pTQLZ/JvD6LJzM71wtT6Zb20BzURCg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
